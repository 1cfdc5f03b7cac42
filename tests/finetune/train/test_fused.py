"""The memory-lean ops give autograd's numbers and keep fewer tensors for backward."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from finetune.train.fused import lean_head, linear_cross_entropy_sum, silu_mul, use_lean_swiglu
from finetune.train.steps import loss_sum


def test_silu_mul_gradients_match_autograd():
    gate = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    up = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(silu_mul, (gate, up))
    torch.testing.assert_close(silu_mul(gate, up), F.silu(gate) * up)


def test_silu_mul_saving_bf16_keeps_the_output_and_rounds_gradients_slightly():
    torch.manual_seed(0)
    gate = torch.randn(4, 32, 64, requires_grad=True)
    up = torch.randn(4, 32, 64, requires_grad=True)
    grad = torch.randn(4, 32, 64)
    out = silu_mul(gate, up, torch.bfloat16)
    torch.testing.assert_close(out, F.silu(gate) * up, rtol=0, atol=0)  # forward is exact
    lean = torch.autograd.grad(out, (gate, up), grad)
    exact = torch.autograd.grad(F.silu(gate) * up, (gate, up), grad)
    for a, b in zip(lean, exact, strict=True):
        rel = (a - b).norm() / b.norm()
        assert 0 < rel < 5e-3, rel


@pytest.mark.parametrize("rows,chunk", [(1, 4), (10, 4), (12, 4), (7, 256)])
def test_linear_cross_entropy_matches_full_logits(rows, chunk):
    torch.manual_seed(0)
    hidden = torch.randn(rows, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(33, 8, dtype=torch.float64)
    targets = torch.randint(0, 33, (rows,))
    lean = linear_cross_entropy_sum(hidden, weight, targets, chunk)
    (grad_lean,) = torch.autograd.grad(lean * 0.5, hidden)
    full = F.cross_entropy(hidden @ weight.t(), targets, reduction="sum")
    (grad_full,) = torch.autograd.grad(full * 0.5, hidden)
    torch.testing.assert_close(lean, full)
    torch.testing.assert_close(grad_lean, grad_full)


def _exact_swiglu(self, x):
    return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))


def _lora_llama(tiny_llama_dir, lean: bool):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    )
    if lean:
        assert use_lean_swiglu(model) == base.config.num_hidden_layers
    return model.train()


def _batch():
    torch.manual_seed(1)
    ids = torch.randint(5, 200, (3, 24))
    mask = torch.ones_like(ids)
    mask[0, 20:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :6] = -100  # prompt tokens
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loss_and_grads(model, batch, selective: bool):
    model.zero_grad()
    loss, n = loss_sum(model, batch, selective=selective)
    (loss / n).backward()
    return loss.detach(), {
        k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad
    }


def test_lean_training_step_equals_full_logits_step(tiny_llama_dir):
    """LoRA gradients through the lean SwiGLU and the lean head equal those of the plain
    model computing every logit."""
    batch = _batch()
    plain = _lora_llama(tiny_llama_dir, lean=False)
    lean = _lora_llama(tiny_llama_dir, lean=True)
    assert lean_head(lean) is not None
    loss_a, grads_a = _loss_and_grads(plain, batch, selective=False)
    loss_b, grads_b = _loss_and_grads(lean, batch, selective=True)
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 0
    for k in grads_a:  # the MLP's saved inputs are bf16: gradients agree to a fraction of 1 %
        rel = (grads_a[k] - grads_b[k]).norm() / grads_a[k].norm()
        assert rel < 1e-2, (k, rel)
    # exact with the bf16 saving off: the lean ops themselves change nothing
    for layer in lean.get_base_model().model.layers:
        layer.mlp.forward = types.MethodType(_exact_swiglu, layer.mlp)
    _, grads_c = _loss_and_grads(lean, batch, selective=True)
    for k in grads_a:
        torch.testing.assert_close(grads_a[k], grads_c[k], rtol=1e-4, atol=1e-6)
    assert lean.get_base_model().lm_head.__class__ is torch.nn.Linear  # head put back


def _saved_bytes(model, batch) -> int:
    seen: dict = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = loss_sum(model, batch)
    return sum(n for ptr, n in seen.items() if ptr not in params)


def test_lean_ops_keep_fewer_tensors_for_backward(tiny_llama_dir):
    batch = _batch()
    plain = _saved_bytes(_lora_llama(tiny_llama_dir, lean=False), batch)
    lean = _saved_bytes(_lora_llama(tiny_llama_dir, lean=True), batch)
    assert lean < 0.9 * plain, (lean, plain)


def test_under_bf16_autocast_the_lean_head_computes_the_loss_in_bf16_with_a_weight_cast_once(
    tiny_llama_dir,
):
    batch = _batch()
    plain, lean = _lora_llama(tiny_llama_dir, lean=False), _lora_llama(tiny_llama_dir, lean=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        weight = lean_head(lean)
        assert weight.dtype == torch.bfloat16 and lean_head(lean) is weight  # cast once, kept
        with torch.inference_mode():  # a validation pass first: its cast must serve training too
            val_loss, _ = loss_sum(lean, batch)
        loss_a, grads_a = _loss_and_grads(
            plain, batch, selective=False
        )  # autocast's head, every logit
        loss_b, grads_b = _loss_and_grads(lean, batch, selective=True)
    exact_loss, exact = _loss_and_grads(
        _lora_llama(tiny_llama_dir, lean=False), batch, selective=False
    )
    assert lean_head(lean).dtype == torch.float32  # no autocast: the weight itself
    torch.testing.assert_close(val_loss, loss_b)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-2, atol=0)
    for k in exact:  # both round the head's products to bf16; the lean one no farther from fp32
        lean_error, plain_error = ((g[k] - exact[k]).norm() for g in (grads_b, grads_a))
        assert lean_error < 0.05 * exact[k].norm() and lean_error < 2.5 * plain_error + 1e-6, k


def test_lean_head_is_not_used_where_it_would_be_wrong(tiny_llama_dir):
    model = _lora_llama(tiny_llama_dir, lean=False)
    with torch.autocast("cpu", dtype=torch.float16):
        assert lean_head(model) is None
    model.get_base_model().lm_head.weight.requires_grad_(True)
    assert lean_head(model) is None


def test_lean_dropout_keeps_the_rate_scales_and_routes_gradients_through_its_mask():
    from finetune.train.lean_lora import LeanDropout, keep_scale

    torch.manual_seed(0)
    drop = LeanDropout(0.1).train()
    x = torch.randn(64, 128, 96, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005  # 786k draws: the rate is p
    assert keep_scale(0.1) == pytest.approx(1 / 0.9, rel=1e-4)  # p rounded to a multiple of 2^-16
    torch.testing.assert_close(
        y[kept], x[kept] * keep_scale(0.1)
    )  # inverted dropout: kept values scaled
    grad = torch.randn_like(x)
    (gx,) = torch.autograd.grad(y, x, grad)
    torch.testing.assert_close(
        gx, torch.where(kept, grad * keep_scale(0.1), torch.zeros_like(grad))
    )
    assert torch.equal(drop.eval()(x), x)  # evaluation: identity
    torch.manual_seed(1)
    a = LeanDropout(0.1).train()(x)
    torch.manual_seed(1)
    assert torch.equal(a, LeanDropout(0.1).train()(x))  # the global seed makes it reproducible


def test_lean_dropout_replaces_only_cpu_lora_dropouts(tiny_llama_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from finetune.train.lean_lora import LeanDropout, use_lean_dropout

    for p, expected in ((0.1, 2 * 2), (0.0, 0)):  # 2 layers x (q_proj, v_proj)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(tiny_llama_dir),
            LoraConfig(r=4, lora_dropout=p, target_modules=["q_proj", "v_proj"]),
        )
        assert use_lean_dropout(model) == expected
        lean = [m for m in model.modules() if isinstance(m, LeanDropout)]
        assert len(lean) == expected and all(m.p == p for m in lean)
