"""The lean LoRA layer computes what PEFT's LoRA ``Linear`` computes, and steps aside where it
does not apply."""

from __future__ import annotations

import pytest
import torch

from finetune.train import lean_lora
from finetune.train.lean_lora import keep_mask, keep_scale, keep_threshold, use_lean_lora

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora_model(tiny_llama_dir, dropout: float, **extra):
    """The tiny llama with a LoRA adapter whose B is random (a fresh B of zeros hides bugs)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=dropout,
        target_modules=TARGETS,
        init_lora_weights=False,
        **extra,
    )
    return get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llama_dir), config).train()


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


class _GivenMask(torch.nn.Module):
    """Dropout that applies masks handed to it, in call order (the reference for the test)."""

    def __init__(self, masks, scale):
        super().__init__()
        self.masks, self.scale = masks, scale

    def forward(self, x):
        return x * next(self.masks) * self.scale


def _give_masks(model, masks, dropout: float) -> None:
    """Make ``model``'s LoRA dropouts apply ``masks`` in call order (PEFT calls its LoRA layers
    in the same order as the lean ones drew them)."""
    given = iter(masks)
    for module in model.modules():
        if hasattr(module, "lora_dropout"):
            module.lora_dropout["default"] = _GivenMask(given, keep_scale(dropout))


def test_keep_mask_has_the_rate_and_follows_torch_seed():
    torch.manual_seed(3)
    a = keep_mask((512, 1024), 0.1)
    assert a.dtype == torch.uint8 and a.shape == (512, 1024) and set(a.unique().tolist()) == {0, 1}
    assert abs(a.float().mean().item() - 0.9) < 0.003  # 524k draws
    b = keep_mask((512, 1024), 0.1)
    assert not torch.equal(a, b)  # each call draws afresh
    torch.manual_seed(3)
    assert torch.equal(a, keep_mask((512, 1024), 0.1))  # torch.manual_seed reproduces it
    assert keep_mask((7, 5), 0.0).all() and not keep_mask((7, 5), 1.0).any()
    assert keep_threshold(0.1) == 6554 and keep_scale(0.1) == 65536 / (65536 - 6554)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_lean_layers_match_peft_loss_and_every_gradient(tiny_llama_dir, monkeypatch, dropout):
    ids = torch.randint(0, 100, (2, 12))
    lean = _lora_model(tiny_llama_dir, dropout)
    assert use_lean_lora(lean) == 2 * len(TARGETS)
    masks = []
    if dropout:
        drawn = lean_lora.keep_mask
        monkeypatch.setattr(lean_lora, "keep_mask", lambda *a: masks.append(drawn(*a)) or masks[-1])
    lean_loss, lean_grads = _loss_and_grads(lean, ids)

    reference = _lora_model(tiny_llama_dir, dropout)  # plain PEFT, same weights
    if dropout:
        assert len(masks) == 2 * len(TARGETS)
        _give_masks(reference, masks, dropout)
    ref_loss, ref_grads = _loss_and_grads(reference, ids)

    torch.testing.assert_close(lean_loss, ref_loss)
    assert lean_grads.keys() == ref_grads.keys() and len(ref_grads) == 2 * 2 * len(
        TARGETS
    )  # A and B
    for name, grad in ref_grads.items():
        assert grad.abs().sum() > 0, name
        # Float sums in another order (the lean layer's fused products): errors scale with the
        # gradient's size, so the absolute tolerance does too (a fixed 1e-6 failed on one CPU).
        atol = 1e-5 * grad.abs().max().item()
        torch.testing.assert_close(
            lean_grads[name], grad, rtol=1e-4, atol=atol, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_lean_dropout_masks_differ_per_layer_and_keep_the_rate(tiny_llama_dir, monkeypatch):
    model = _lora_model(tiny_llama_dir, 0.25)
    use_lean_lora(model)
    masks = []
    drawn = lean_lora.keep_mask
    monkeypatch.setattr(lean_lora, "keep_mask", lambda *a: masks.append(drawn(*a)) or masks[-1])
    model(input_ids=torch.randint(0, 100, (4, 64)))
    q, k = masks[0], masks[1]  # q_proj and k_proj read the same input
    assert q.shape == k.shape and not torch.equal(q, k)
    rate = 1 - torch.cat([m.flatten() for m in masks]).float().mean().item()
    assert abs(rate - 0.25) < 0.01


def test_calls_it_does_not_cover_run_peft_forward(tiny_llama_dir):
    ids = torch.randint(0, 100, (2, 12))
    model = _lora_model(tiny_llama_dir, 0.1)
    reference = _lora_model(tiny_llama_dir, 0.1)
    use_lean_lora(model)
    calls = []
    real = lean_lora._LoraLinear.apply
    lean_lora._LoraLinear.apply = lambda *a: calls.append(1) or real(*a)
    try:
        for m in (model, reference):
            m.eval()
        torch.testing.assert_close(
            model(input_ids=ids).logits, reference(input_ids=ids).logits
        )  # eval
        model.train()
        with torch.no_grad():
            model(input_ids=ids)
        with torch.autocast("cpu", dtype=torch.float16):  # autocast in another dtype than bf16
            model(input_ids=ids, labels=ids).loss.backward()
        with model.disable_adapter(), reference.disable_adapter():
            torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)
        assert calls == []
        model(input_ids=ids, labels=ids).loss.backward()
        assert len(calls) == 2 * len(TARGETS)
    finally:
        lean_lora._LoraLinear.apply = real


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_under_bf16_autocast_the_lean_layers_match_peft_and_cast_the_frozen_weights_once(
    tiny_llama_dir, monkeypatch, dropout
):
    torch.manual_seed(1)
    ids = torch.randint(0, 100, (2, 12))
    lean, reference, exact = (_lora_model(tiny_llama_dir, dropout) for _ in range(3))
    use_lean_lora(lean)
    masks, calls = [], []
    drawn, real = lean_lora.keep_mask, lean_lora._LoraLinear.apply
    monkeypatch.setattr(lean_lora, "keep_mask", lambda *a: masks.append(drawn(*a)) or masks[-1])
    monkeypatch.setattr(lean_lora._LoraLinear, "apply", lambda *a: calls.append(a) or real(*a))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lean_loss, lean_grads = _loss_and_grads(lean, ids)
        if dropout:
            _give_masks(reference, masks, dropout)
        ref_loss, ref_grads = _loss_and_grads(reference, ids)
    if dropout:
        _give_masks(exact, masks, dropout)
    exact_grads = _loss_and_grads(exact, ids)[1]  # the same in fp32: what both approximate
    assert len(calls) == 2 * len(TARGETS) and all(
        a[0].dtype == a[1].dtype == a[3].dtype == torch.bfloat16 for a in calls
    )
    torch.testing.assert_close(lean_loss, ref_loss, rtol=1e-2, atol=1e-2)
    assert lean_grads.keys() == ref_grads.keys() and len(ref_grads) == 2 * 2 * len(TARGETS)
    # Both round every product to bf16 (8 bits of mantissa), in another order: 1-7 % off the
    # fp32 gradients per weight, either way; over all weights, in six draws, 1.2-7.3 % (lean)
    # against 1.2-6.8 % (PEFT), the lean layers closer in three of them.
    for name, grad in exact_grads.items():
        assert lean_grads[name].dtype == torch.float32  # the fp32 LoRA weights get their gradients
        assert (lean_grads[name] - grad).norm() <= 0.1 * grad.norm(), name

    def error(grads):
        return sum((grads[n] - g).norm() ** 2 for n, g in exact_grads.items()) ** 0.5

    total = sum(g.norm() ** 2 for g in exact_grads.values()) ** 0.5
    assert error(lean_grads) <= min(0.1 * total, 2.5 * error(ref_grads))

    layer = next(m for m in lean.modules() if hasattr(m, "lora_A"))
    first = lean_lora.frozen_cast(layer.base_layer, layer.base_layer.weight, torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _loss_and_grads(lean, ids)
    again = lean_lora.frozen_cast(layer.base_layer, layer.base_layer.weight, torch.bfloat16)
    assert again is first and torch.equal(first, layer.base_layer.weight.to(torch.bfloat16))
    with torch.no_grad():
        layer.base_layer.weight.mul_(2)  # a changed weight is cast afresh
    assert torch.equal(
        lean_lora.frozen_cast(layer.base_layer, layer.base_layer.weight, torch.bfloat16), 2 * first
    )


def test_dora_layers_are_left_to_peft(tiny_llama_dir):
    ids = torch.randint(0, 100, (2, 12))
    model, reference = (_lora_model(tiny_llama_dir, 0.0, use_dora=True) for _ in range(2))
    use_lean_lora(model)
    torch.testing.assert_close(_loss_and_grads(model, ids)[0], _loss_and_grads(reference, ids)[0])


def test_gradient_checkpointing_recomputes_the_same_dropout_masks(tiny_llama_dir):
    """Checkpointing re-runs each layer's forward in backward; a different mask there would
    silently give wrong gradients. The masks follow torch's RNG state, which it restores."""
    ids = torch.randint(0, 100, (2, 12))
    results = []
    for checkpointing in (False, True):
        model = _lora_model(tiny_llama_dir, 0.3)
        if checkpointing:
            model.get_base_model().activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
            model.enable_input_require_grads()
        use_lean_lora(model)
        torch.manual_seed(7)
        results.append(_loss_and_grads(model, ids))
    (plain_loss, plain), (ckpt_loss, ckpt) = results
    torch.testing.assert_close(ckpt_loss, plain_loss)
    assert plain.keys() == ckpt.keys()
    for name, grad in plain.items():
        torch.testing.assert_close(ckpt[name], grad, msg=name)
