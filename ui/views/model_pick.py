"""The Train tab's base-model picker: what a typed value means. No gradio here.

Enter takes the text as typed (ui/views/typed_choice.py: Gradio's dropdown picked the first
option the text filtered to, so "qwen3" became Qwen3 0.6B); a catalog model's name typed in
full then becomes that model (:func:`picked_model`), and a part of one names the models it could
be (:func:`hint`).
"""

from __future__ import annotations

from pathlib import Path

from core.model_catalog import CATALOG, find, label

PICKER_ID = "train-model"


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
