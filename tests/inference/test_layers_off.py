"""adapters_off: the base model's logits, and every layer's own flag back afterwards."""

from __future__ import annotations

import torch

from inference.layers_off import adapters_off


def test_adapters_off_gives_the_base_logits_and_restores_each_flag(tiny_llama_dir):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    plain = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    ids = torch.randint(0, plain.config.vocab_size, (2, 9))
    with torch.inference_mode():
        base = plain(input_ids=ids).logits
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    model = get_peft_model(plain, config).eval()
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    layers[0]._disable_adapters = True  # one layer off already: it must stay off afterwards
    with torch.inference_mode():
        tuned = model(input_ids=ids).logits
        with adapters_off(model):
            off = model(input_ids=ids).logits
        again = model(input_ids=ids).logits
    assert torch.equal(off, base) and not torch.allclose(tuned, base)
    assert torch.equal(again, tuned)
    assert layers[0]._disable_adapters and not any(m._disable_adapters for m in layers[1:])
