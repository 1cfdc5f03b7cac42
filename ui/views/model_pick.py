"""The Train tab's base-model picker: what a typed value means, and the page's script that keeps
Enter from swapping what was typed for the first option it filters to. No gradio here.

Gradio's dropdown picks, on Enter, the first option whose label holds the text typed: "qwen3"
(a folder, or a half-typed name) became Qwen3 0.6B, "gemma" Gemma 3 270M, with nothing said. The
script makes Enter take the text as typed, as leaving the box does; an option reached with the
arrow keys is still picked by Enter. A catalog model's name typed in full then becomes that
model (:func:`picked_model`), and a part of one names the models it could be (:func:`hint`).
"""

from __future__ import annotations

from pathlib import Path

from core.model_catalog import CATALOG, find, label

PICKER_ID = "train-model"

# Capturing keydown on the document runs before the dropdown's own handler: an Enter typed
# straight after text leaves the box instead, and leaving it keeps the text (or the option the
# text names exactly).
PICKER_JS = f"""
(() => {{
  let moved = false;
  document.addEventListener("keydown", (e) => {{
    const input = e.target;
    if (!(input instanceof HTMLInputElement) || !input.closest("#{PICKER_ID}")) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {{ moved = true; return; }}
    if (e.key !== "Enter") {{ moved = false; return; }}
    if (moved) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    input.blur();
  }}, true);
}})();
"""


def picked_model(value: str | None) -> str:
    """The model a typed value names: a catalog model's Hub id for its name or its picker label
    typed in full (any case), otherwise the text as typed, trimmed."""
    text = (value or "").strip()
    by_label = next((m for m in CATALOG if label(m).lower() == text.lower()), None)
    model = by_label or find(text)
    return model.hub_id if model else text


def hint(value: str | None) -> str:
    """A warning for typed text that is part of recommended models' names or ids, and is no
    folder here, naming those models. "" otherwise."""
    text = (value or "").strip()
    if not text or find(picked_model(text)) or Path(text).expanduser().is_dir():
        return ""
    low = text.lower()
    near = [m.name for m in CATALOG if low in m.name.lower() or low in m.hub_id.lower()]
    if not near:
        return ""
    return (
        f"⚠️ '{text}' is no folder here, nor a recommended model's full name: did you mean "
        f"{' or '.join(near)}? Pick it from the list."
    )
