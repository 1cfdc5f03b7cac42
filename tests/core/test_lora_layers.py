"""PEFT's LoRA internals in one place (core/lora_layers.py), checked against PEFT's own forward
on a tiny llama built from a config."""

from __future__ import annotations

import math

import pytest
import torch

from core import lora_layers

TARGETS = ["q_proj", "v_proj", "down_proj"]


def _peft_model(tiny_llama_dir, **extra):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False, **extra)
    return get_peft_model(base, config, adapter_name="first").eval()


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


@pytest.fixture
def model(tiny_llama_dir):
    return _peft_model(tiny_llama_dir)


def test_lora_linears_are_the_targeted_layers_and_scaling_is_alpha_over_r(model):
    from peft import LoraConfig

    model.add_adapter(
        "second", LoraConfig(r=8, lora_alpha=4, target_modules=["v_proj"], init_lora_weights=False)
    )
    first = lora_layers.lora_linears(model, "first")
    second = lora_layers.lora_linears(model, "second")
    layers = model.config.num_hidden_layers
    assert len(first) == len(TARGETS) * layers and len(second) == layers
    assert {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if m in second} == {"v_proj"}
    assert all(lora_layers.is_lora_linear(m) for m in first)
    lora = lora_layers.parts(second[0], "second")
    assert (lora.rank, lora.scaling) == (8, 0.5)
    assert lora.a.weight.shape == (8, second[0].in_features)
    assert lora.b.weight.shape == (second[0].out_features, 8)
    assert lora_layers.parts(first[0], "first").scaling == 2.0
    assert lora_layers.tuner_layers(model) == first  # "second" sits in some of the same layers
    assert lora_layers.adapter_layers(model, "second") == second
    assert lora_layers.adapter_layers(model, "missing") == []


def test_rslora_scaling_is_alpha_over_root_r(tiny_llama_dir):
    model = _peft_model(tiny_llama_dir, use_rslora=True)
    layer = lora_layers.lora_linears(model, "first")[0]
    assert lora_layers.parts(layer, "first").scaling == pytest.approx(8 / math.sqrt(4))


def test_the_reported_a_and_b_are_the_tensors_peft_runs(model):
    """Writing B through the parts this module reports changes PEFT's own output: zero B in
    every layer and the model answers as the base; restore it and the update is back."""
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    tuned = _logits(model, ids)
    with model.disable_adapter():
        base = _logits(model, ids)
    assert not torch.allclose(tuned, base)
    saved = []
    with torch.no_grad():
        for layer in lora_layers.lora_linears(model, "first"):
            b = lora_layers.parts(layer, "first").b.weight
            saved.append((b, b.clone()))
            b.zero_()
    assert torch.equal(_logits(model, ids), base)
    with torch.no_grad():
        for b, value in saved:
            b.copy_(value)
    assert torch.equal(_logits(model, ids), tuned)


def test_delta_is_what_peft_adds_to_the_base_weight(model):
    layer = lora_layers.lora_linears(model, "first")[0]
    base = lora_layers.base_layer(layer)
    x = torch.randn(3, 5, layer.in_features)
    with torch.inference_mode():
        peft_out = layer(x)
        merged_out = torch.nn.functional.linear(
            x, base.weight + lora_layers.parts(layer, "first").delta(), base.bias
        )
        base_out = base(x)
    torch.testing.assert_close(merged_out, peft_out, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(base_out, peft_out)
    assert lora_layers.wrapped_layer(layer) is base  # no wrapper in between here


def test_set_dropout_replaces_the_module_peft_applies(model):
    layer = lora_layers.lora_linears(model, "first")[0]
    assert type(lora_layers.dropouts(layer)["first"]) is torch.nn.Identity  # lora_dropout=0
    assert lora_layers.dropouts(torch.nn.Linear(2, 2)) == {}
    x = torch.randn(4, layer.in_features)
    base = lora_layers.base_layer(layer)
    lora_layers.set_dropout(layer, "first", torch.nn.Dropout(1.0))  # drops every input
    layer.train()
    with torch.no_grad():
        assert torch.equal(layer(x), base(x))
    assert lora_layers.parts(layer, "first").dropout is lora_layers.dropouts(layer)["first"]


def test_single_active_adapter_follows_peft_state(model):
    layer = lora_layers.lora_linears(model, "first")[0]
    assert lora_layers.single_active_adapter(layer) == "first"
    with model.disable_adapter():
        assert lora_layers.single_active_adapter(layer) is None
    layer.merge()
    assert lora_layers.single_active_adapter(layer) is None
    assert not lora_layers.is_plain(layer, ["first"])
    layer.unmerge()
    assert lora_layers.is_plain(layer, ["first"], bias_free=True)


def test_dora_and_lora_bias_are_not_plain(tiny_llama_dir):
    dora = lora_layers.lora_linears(_peft_model(tiny_llama_dir, use_dora=True), "first")[0]
    assert lora_layers.has_variant(dora, "first") and not lora_layers.is_plain(dora, ["first"])
    assert lora_layers.single_active_adapter(dora) is None
    biased = lora_layers.lora_linears(_peft_model(tiny_llama_dir, lora_bias=True), "first")[0]
    assert lora_layers.has_lora_bias(biased, "first")
    assert lora_layers.is_plain(biased, ["first"])
    assert not lora_layers.is_plain(biased, ["first"], bias_free=True)


def test_the_adapters_off_flag_is_the_one_peft_reads(model):
    ids = torch.randint(0, model.config.vocab_size, (1, 6))
    tuned = _logits(model, ids)
    with model.disable_adapter():
        base = _logits(model, ids)
    layers = lora_layers.switchable_layers(model)
    assert len(layers) == len(lora_layers.lora_linears(model, "first"))
    assert not any(lora_layers.adapters_disabled(m) for m in layers)
    for m in layers:
        lora_layers.set_adapters_disabled(m, True)
    assert torch.equal(_logits(model, ids), base)
    for m in layers:
        lora_layers.set_adapters_disabled(m, False)
    assert torch.equal(_logits(model, ids), tuned)
