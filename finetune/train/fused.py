"""Memory-lean training ops in plain torch: a SwiGLU that saves two tensors instead of three,
and a cross-entropy that never keeps the (tokens x vocabulary) logits.

Activations are most of a LoRA step's memory. The MLP's ``silu(gate) * up`` saves ``gate``,
``silu(gate)`` and ``up`` (three intermediate-width tensors a token a layer); recomputing the
cheap ``silu`` in backward saves one of them, and keeping the other two in bf16 halves what is
left. The LM head over a large vocabulary keeps its logits and their softmax for backward;
computing the gradient with respect to the hidden states chunk by chunk during the forward pass
keeps only a (tokens x hidden) tensor. Both do the same matrix products as autograd would.

On the CPU, training also runs its LoRA layers and their dropout through
``finetune.train.lean_lora`` (``use_lean_ops`` below).
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F  # noqa: N812

from core import families

CE_CHUNK_ROWS = 256  # logits of 256 label tokens x 49k vocabulary in fp32: 48 MiB at a time


class _SiluMul(torch.autograd.Function):
    """``silu(gate) * up``, saving only ``gate`` and ``up`` (in ``save_dtype`` if given)."""

    @staticmethod
    def forward(ctx, gate, up, save_dtype):
        ctx.save_for_backward(*(t.to(save_dtype) if save_dtype else t for t in (gate, up)))
        ctx.dtype = gate.dtype
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        gate, up = (t.to(ctx.dtype) for t in ctx.saved_tensors)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        grad_up = grad * silu
        # d silu / d gate = sig * (1 + gate * (1 - sig)) = sig + silu * (1 - sig)
        grad_gate = grad * up * (sig + silu * (1 - sig))
        return grad_gate, grad_up, None


def silu_mul(
    gate: torch.Tensor, up: torch.Tensor, save_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``F.silu(gate) * up``; with ``save_dtype`` (bf16) the two saved inputs take half the
    memory, so the backward pass sees them rounded to 8 bits of mantissa (the forward pass,
    and so the loss, are unchanged; the gradients differ by ~0.1-0.4 %, tested)."""
    return _SiluMul.apply(gate, up, save_dtype)


def _swiglu_forward(self, x):
    gate = self.gate_proj(x)
    # fp32 training keeps gate and up for backward in bf16: 180 MiB less at batch 8 x 128 on
    # the default model, the largest activation there is (half-precision runs save as they are).
    save = torch.bfloat16 if gate.dtype == torch.float32 and self.training else None
    return self.down_proj(silu_mul(gate, self.up_proj(x), save))


def use_lean_swiglu(model) -> int:
    """Route every SwiGLU MLP (``gate_proj``/``up_proj``/``down_proj`` with SiLU) of ``model``
    through ``silu_mul``, for the families proven equal (``core.families``); LoRA layers inside
    stay as they are. Returns how many were changed."""
    if not families.allows(_model_type(model), "lean_swiglu"):
        return 0
    changed = 0
    for module in model.modules():
        if all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj")) and _is_silu(
            getattr(module, "act_fn", None)
        ):
            module.forward = types.MethodType(_swiglu_forward, module)
            changed += 1
    return changed


def _is_silu(act) -> bool:
    """transformers has its own SiLU module class; check what the function computes."""
    if not callable(act):
        return False
    probe = torch.linspace(-6, 6, 49)
    with torch.no_grad():
        return torch.allclose(act(probe), F.silu(probe), atol=1e-6)


def use_lean_ops(model, layers: bool = True) -> None:
    """What training uses: the lean SwiGLU and, on the CPU (``layers``), the lean LoRA layers
    and dropout and short-row attention (``finetune.train.cpu_attention``)."""
    from finetune.train.cpu_attention import use_short_row_attention
    from finetune.train.lean_lora import use_lean_dropout, use_lean_lora

    use_lean_swiglu(model)
    if not layers:
        return
    use_lean_dropout(model)
    use_lean_lora(model)
    use_short_row_attention(model)


class _LinearCrossEntropySum(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T`` against ``targets``, chunk by chunk.

    The gradient with respect to ``hidden`` is computed in the forward pass (softmax minus
    one-hot, times the weight) and is the only thing saved; ``weight`` must be frozen.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_rows: int):
        need_grad = hidden.requires_grad
        grad_hidden = torch.empty_like(hidden) if need_grad else None
        acc = torch.promote_types(hidden.dtype, torch.float32)  # softmax in fp32 at least
        total = torch.zeros((), dtype=acc, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_rows):
            h, t = hidden[start : start + chunk_rows], targets[start : start + chunk_rows]
            logits = (h @ weight.t()).to(acc)
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            if need_grad:
                probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
                probs[torch.arange(len(t), device=t.device), t] -= 1.0
                grad_hidden[start : start + chunk_rows] = (probs.to(weight.dtype) @ weight).to(
                    hidden.dtype
                )
        ctx.save_for_backward(grad_hidden if need_grad else None)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        (grad_hidden,) = ctx.saved_tensors
        return grad_hidden * grad_total.to(grad_hidden.dtype), None, None, None


def linear_cross_entropy_sum(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_rows: int = CE_CHUNK_ROWS,
) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T, targets, reduction="sum")`` without keeping logits."""
    return _LinearCrossEntropySum.apply(hidden, weight, targets, chunk_rows)


class _Passthrough(torch.nn.Module):
    def forward(self, x):
        return x


def lean_head(model):
    """The frozen LM-head weight if ``model``'s loss can use ``linear_cross_entropy_sum``, else
    None (a family not proven equal in ``core.families``, such as Granite, whose logits are
    scaled after the head; a trainable or biased head, logit soft-capping, DDP-wrapped,
    FSDP-sharded, or under any autocast but the CPU's bf16). Under FSDP the head's weight is a shard
    outside the model's forward, so the head must run inside it. Under the CPU's bf16 autocast the
    weight comes in bf16, cast once (``lean_lora.frozen_cast``; autocast would cast it again for
    every chunk of rows), and the caller casts the hidden states to it."""
    from finetune.train.lean_lora import cpu_bf16_autocast, frozen_cast

    kind = _device_type(model)
    if (
        hasattr(model, "module")
        or _sharded(model)
        or not families.allows(_model_type(model), "lean_head")
    ):
        return None
    autocast = torch.is_autocast_enabled(kind)
    if autocast and not cpu_bf16_autocast(kind):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    config = getattr(base, "config", None)
    if (
        not isinstance(head, torch.nn.Linear)
        or head.bias is not None
        or head.weight.requires_grad
        or getattr(config, "final_logit_softcapping", None)
        or _name_of(base, head) is None
    ):
        return None
    return frozen_cast(head, head.weight, torch.bfloat16) if autocast else head.weight


@contextlib.contextmanager
def head_returns_hidden(model):
    """While open, the model's LM head returns its input, so ``model(...).logits`` holds the
    selected final hidden states instead of logits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    name = _name_of(base, head)
    setattr(base, name, _Passthrough())
    try:
        yield
    finally:
        setattr(base, name, head)


def _model_type(model) -> str:
    return getattr(getattr(model, "config", None), "model_type", "")


def _sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _name_of(parent, child) -> str | None:
    return next((n for n, m in parent.named_children() if m is child), None)


def _device_type(model) -> str:
    try:
        return next(model.parameters()).device.type
    except StopIteration:
        return "cpu"
