"""Dropdowns that take typed text as well as their options (``allow_custom_value``): the page's
script that keeps Enter from swapping what was typed for another option. No gradio here.

Gradio's dropdown picks, on Enter, the first option whose label holds the text typed: "qwen3"
(a folder) in the base-model picker became Qwen3 0.6B, a column "cat" in Slice by column became
"category", an alias "bot" typed beside "support-bot" became that alias, with nothing said. The
script makes Enter take the text as typed, as leaving the box does (leaving it keeps the text, or
the option the text names exactly); an option reached with the arrow keys is still picked.
"""

from __future__ import annotations

# Every dropdown of the tabs that takes typed text, by elem_id (tests/ui/views/test_typed_choice.py
# checks none is left out).
TYPED_IDS = (
    "train-model",
    "train-from",
    "eval-slice-by",
    "alias-name",
    "alias-version",
    "alias-grounding",
    "review-intent",
)

_SELECTOR = ", ".join(f"#{elem_id}" for elem_id in TYPED_IDS)

# Capturing keydown on the document runs before the dropdown's own handler: an Enter typed
# straight after text leaves the box instead.
ENTER_KEEPS_TYPED_JS = f"""
(() => {{
  let moved = false;
  document.addEventListener("keydown", (e) => {{
    const input = e.target;
    if (!(input instanceof HTMLInputElement) || !input.closest("{_SELECTOR}")) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {{ moved = true; return; }}
    if (e.key !== "Enter") {{ moved = false; return; }}
    if (moved) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    input.blur();
  }}, true);
}})();
"""
