"""finetune/train/saving.py: saving an adapter or a checkpoint never asks the Hub."""

from __future__ import annotations

import json

import peft.utils.save_and_load as peft_saving
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from finetune.train.saving import save_adapter

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_saving_an_adapter_named_by_its_hub_id_asks_the_hub_nothing(
    tiny_llama_dir, home, monkeypatch
):
    """A DPO / CPO / ORPO run continues an adapter whose config names its base by Hub id;
    PEFT's save then looked the id up on the Hub for a config.json (online: a request;
    offline: 'Unable to fetch remote file ... Could not find a config file' warnings)."""
    asked = []
    monkeypatch.setattr(peft_saving, "check_file_exists_on_hf_hub", lambda *a, **k: asked.append(a))
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir),
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]),
    )
    model.peft_config["default"].base_model_name_or_path = HUB_ID
    path = save_adapter(model, None, "from-hub-id", {"base_model": {"name": HUB_ID}})
    assert asked == []
    assert json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"] == (
        HUB_ID
    )
    assert (path / "adapter_model.safetensors").stat().st_size > 0
