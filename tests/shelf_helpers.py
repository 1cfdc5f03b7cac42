"""Putting adapters on the shelf for the GGUF export tests."""

from __future__ import annotations

import tempfile
from pathlib import Path


def put_adapter(
    base_dir: Path,
    name: str,
    *,
    dora: bool = False,
    seed: int = 0,
    targets=("q_proj", "v_proj"),
    scale: float = 0.2,
):
    """Save a random LoRA (non-zero B) on ``base_dir`` and import it onto the current shelf."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from adapters.export import import_adapter

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), use_dora=dora)
    peft = get_peft_model(model, config)
    with torch.no_grad():
        for pname, param in peft.named_parameters():
            if "lora_B" in pname:
                param.normal_(0, scale)
    with tempfile.TemporaryDirectory() as scratch:  # never beside base_dir (a shared model cache)
        peft.save_pretrained(scratch)
        return import_adapter(Path(scratch), name)
