"""The Train tab's base-model picker: the recommended models by name, and any Hub id or folder
typed in still reaches the run as typed."""

from __future__ import annotations

import gradio as gr

from core.model_catalog import CATALOG
from ui.tabs.train import model_picker


def test_picker_offers_the_catalog_and_takes_a_custom_id():
    with gr.Blocks():
        picker = model_picker("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert picker.elem_id == "train-model" and picker.allow_custom_value
    assert [hub for _, hub in picker.choices] == [m.hub_id for m in CATALOG]
    assert picker.preprocess("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a pick sends its Hub id
    assert picker.preprocess("my-org/my-support-model") == "my-org/my-support-model"
    assert picker.preprocess("/data/models/local") == "/data/models/local"


def test_a_custom_starting_value_is_kept():
    with gr.Blocks():
        picker = model_picker("/srv/models/tuned-base")
    assert picker.value == "/srv/models/tuned-base"


def test_the_note_under_the_picker_quotes_the_shipped_table():
    from core import model_costs
    from core.model_catalog import find
    from ui.views.train_check import model_note

    table = model_costs.read()  # assets/model_costs.json ships with the app
    assert table is not None and table["models"]
    hub_id = next(iter(table["models"]))
    text = model_note(hub_id)
    assert (
        text.startswith(f"**Measured cost of {find(hub_id).name}**") and "budget holds" not in text
    )
    assert model_costs.describe_machine(table["machine"]) in text
    assert model_note("my-org/my-support-model") == "" and model_note("") == ""
