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
