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


def test_a_model_name_typed_in_full_becomes_that_model_and_a_part_of_one_is_named(
    home, tiny_llama_dir, tmp_path
):
    """What leaving the box (or Enter, with the page's script) sends is the text as typed: a
    catalog name typed in full becomes its model; a part of names says which models it could be,
    where it was silently the first of them; a folder or another id is left alone."""
    from ui_handlers import handlers

    on_model = handlers(tiny_llama_dir)["on_model"]
    update, note = on_model("smollm2 360m instruct")
    assert update["value"] == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert note.startswith("**Measured cost of SmolLM2 360M Instruct**")
    update, note = on_model("smol")
    assert not isinstance(update, dict) or "value" not in update  # kept as typed
    assert note == (
        "⚠️ 'smol' is no folder here, nor a recommended model's full name: did you mean "
        "SmolLM2 135M Instruct or SmolLM2 360M Instruct? Pick it from the list."
    )
    folder = tmp_path / "qwen3"
    folder.mkdir()
    for typed in (str(folder), "my-org/my-support-model", "Qwen/Qwen3-0.6B"):
        update, note = on_model(typed)
        assert not isinstance(update, dict) or "value" not in update, typed
        assert not note.startswith("⚠️"), typed


def test_start_takes_a_catalog_name_typed_in_full_as_its_model():
    from ui.views import forms

    values = forms.form_values(forms.ui_defaults())
    values[[f for _, f in forms.TRAIN_FIELDS].index("name")] = "  Qwen3 0.6B "
    cfg, problems = forms.to_config("assets/demo_support.jsonl", values)
    assert problems == [] and cfg.model.name == "Qwen/Qwen3-0.6B"
