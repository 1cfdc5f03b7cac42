"""A 4-bit LoRA run on the CPU trains on the same gradients after a validation pass as before
it: bitsandbytes' CPU inference packing (AVX512-BF16 only), which has no backward, stays off."""

from __future__ import annotations

import pytest
import torch


def _lora_grads(model, ids) -> tuple[float, dict]:
    model.train()
    model.zero_grad()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss.item(), {
        n: p.grad.detach().clone()
        for n, p in model.named_parameters()
        if p.grad is not None and "lora_A" in n
    }


def test_an_eval_pass_leaves_4bit_training_gradients_as_they_were(tiny_llama_dir):
    bnb = pytest.importorskip("bitsandbytes")
    from bitsandbytes.nn.modules import has_avx512bf16

    from core.models import resolve
    from finetune.config import LoraArgs
    from finetune.train.model_loading import apply_lora, load_model

    if not has_avx512bf16():
        pytest.skip("bitsandbytes packs 4-bit weights for inference only on AVX512-BF16 CPUs")
    torch.manual_seed(0)
    model = load_model(resolve(str(tiny_llama_dir)), "cpu", "fp32", "4bit")
    model = apply_lora(model, "llama", LoraArgs(r=4, alpha=8), quantization="4bit")
    for name, param in model.named_parameters():
        if "lora_B" in name:  # zero at first: every lora_A gradient would be zero
            torch.nn.init.normal_(param, std=0.02)
    ids = torch.randint(0, 200, (2, 16))
    loss, before = _lora_grads(model, ids)
    model.eval()
    with torch.no_grad():  # what validation and the probes do between steps
        model(input_ids=ids[:1, :4])
    again, after = _lora_grads(model, ids)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    assert again == loss
    assert before.keys() == after.keys() and before
    for name in before:
        assert torch.equal(before[name], after[name]), name
