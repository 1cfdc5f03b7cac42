"""The intent an answer addressed, as Chat and Compare show it. No gradio here.

The classifier is the evaluation's (``eval.checks.answer_intent``), fitted on the training data
of the adapter that answered (its manifest's data path), or on the demo data for the base model,
so a Compare pane of the base and one of the adapter are named by the same classifier.
"""

from __future__ import annotations

from pathlib import Path

from ui.views.forms import DEMO_DATA

REPO = Path(__file__).resolve().parents[2]


def data_of(shelf, adapter: str | None) -> str | None:
    """The file whose labelled answers name the intents: the adapter's training data,
    else the demo data."""
    if adapter:
        try:
            path = ((shelf.get(adapter).manifest or {}).get("data") or {}).get("path")
        except ValueError:
            path = None
        if path:
            return str(path)
    demo = Path(DEMO_DATA)
    return str(demo if demo.is_file() else REPO / DEMO_DATA)


def intents_of(shelf, adapters: list[str | None], texts: list[str]) -> list[str]:
    """One short label per answer: ``addressed: track_order``, or why no intent is shown.

    Every answer is named by the first adapter's classifier (the base's when only it answered).
    """
    from eval.checks.answer_intent import addressed

    first = next((a for a in adapters if a), None)
    named, why = addressed(texts, data_of(shelf, first))
    if not named:
        return [f"intent not shown: {why}"] * len(texts)
    return [f"addressed: {n}" if n else "addressed: no intent (empty answer)" for n in named]


def chat_intent_line(shelf, adapter: str | None, history: list[dict]) -> str:
    """Under the chat: the intent the last answer addressed (empty before any answer)."""
    last = next((m for m in reversed(history or []) if m.get("role") == "assistant"), None)
    content = last.get("content") if last else None
    if isinstance(content, list):
        content = " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    if last is None:
        return ""
    return f"Last answer {intents_of(shelf, [adapter], [str(content or '')])[0]}"
