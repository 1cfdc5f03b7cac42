"""Per-row adapters in one batch (inference/row_routing.py), checked on logits."""

from __future__ import annotations

import pytest
import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def two_adapter_model(tiny_llama_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    model = get_peft_model(
        model,
        LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False),
        adapter_name="first",
    )
    model.add_adapter(
        "second",
        LoraConfig(
            r=8,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "down_proj"],
            init_lora_weights=False,
        ),
    )
    return model.eval()


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _references(model, ids):
    """The base model's logits and each adapter's alone, for one row ``ids``."""
    with model.disable_adapter():
        base = _logits(model, ids)
    alone = {}
    for name in ("first", "second"):
        model.set_adapter(name)
        alone[name] = _logits(model, ids)
    return base, alone


def test_each_row_gets_exactly_its_own_adapter(two_adapter_model):
    from inference.row_routing import can_mask, masked_rows

    model = two_adapter_model
    ids = torch.randint(0, model.config.vocab_size, (1, 12))
    base, alone = _references(model, ids)
    assert not torch.allclose(alone["first"], alone["second"]) and not torch.allclose(
        alone["first"], base
    )

    rows = [None, "first", "second", "first"]
    assert can_mask(model, ["first", "second"])
    with masked_rows(model, rows):
        batch = _logits(model, ids.repeat(len(rows), 1))
    assert torch.equal(batch[0], base[0])  # the base row is bit-identical, not just close
    for i, name in enumerate(rows[1:], start=1):
        torch.testing.assert_close(batch[i], alone[name][0], rtol=1e-5, atol=1e-5)


def test_a_prompt_with_each_adapters_rows_side_by_side_runs_them_per_adapter(
    two_adapter_model, monkeypatch
):
    from inference import row_routing
    from inference.row_routing import _row_ranges, masked_rows

    sig = (("first", 4, 2.0), ("second", 8, 1.0))
    assert _row_ranges(sig, [None, "first", "first", "second"]) == [(1, 3, 0, 2.0), (3, 4, 1, 1.0)]
    assert _row_ranges(sig, ["first", None, "first"]) is None  # split: the mask serves it
    model = two_adapter_model
    ids = torch.randint(0, model.config.vocab_size, (1, 12))  # 12 and 48 rows: MKL's bits agree
    base, alone = _references(model, ids)
    rows = [None, "first", "first", "second"]
    grouped_calls = []
    real = row_routing._StackedLora._grouped
    monkeypatch.setattr(
        row_routing._StackedLora,
        "_grouped",
        lambda self, x, out: grouped_calls.append(1) or real(self, x, out),
    )
    with masked_rows(model, rows):
        batch = _logits(model, ids.repeat(len(rows), 1))
        step = _logits(model, ids[:, :1].repeat(len(rows), 1))  # one token a row: the mask
    assert grouped_calls and len(
        grouped_calls
    ) == sum(  # every LoRA layer once, for the prompt only
        1
        for m in model.modules()
        if hasattr(m, "lora_A") and ("first" in m.lora_A or "second" in m.lora_A)
    )
    assert torch.equal(batch[0], base[0])
    for i, name in enumerate(rows[1:], start=1):
        torch.testing.assert_close(batch[i], alone[name][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(step[i], alone[name][0, :1], rtol=1e-5, atol=1e-5)


def test_the_model_is_plain_peft_again_after_the_block(two_adapter_model):
    from peft.tuners.lora.layer import Linear as LoraLinear

    from inference.row_routing import masked_rows

    model = two_adapter_model
    model.set_adapter("first")
    ids = torch.randint(0, model.config.vocab_size, (1, 8))
    before = _logits(model, ids)
    with pytest.raises(RuntimeError, match="boom"), masked_rows(model, [None, "first"]):
        raise RuntimeError("boom")
    assert not any("forward" in vars(m) for m in model.modules() if isinstance(m, LoraLinear))
    assert model.active_adapters == ["first"]
    torch.testing.assert_close(_logits(model, ids), before, rtol=0, atol=0)


def test_bias_and_dora_layers_fall_back_to_peft_routing(tiny_llama_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from inference.row_routing import can_mask

    for extra in ({"use_dora": True}, {"lora_bias": True}):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=["q_proj"], **extra), adapter_name="x"
        )
        assert not can_mask(model, ["x"]), extra
