"""LoRA training on the CPU in one autograd function per layer, with cheap dropout masks.

PEFT's LoRA ``Linear`` runs, per layer and step, ``base(x) + lora_B(lora_A(dropout(x))) *
scaling``: five modules, a dropped-out copy of ``x`` kept for backward by every layer (q, k
and v each keep their own copy of one input), two full-width elementwise passes for the
scaling and the sum, and weight gradients in matmul layouts that are slow on the CPU
(``grad_B = g^T @ h`` with the long dimension inner).

``lean_lora_forward`` computes the same function with the same parameters:

* forward: ``out = x @ W^T (+ bias)``, then ``out += s * ((x * keep) @ A^T) @ B^T`` as one
  ``addmm_``; only ``x`` (shared with the other layers that read it), the 0/1 ``uint8`` mask
  and the (tokens x r) product are kept for backward, and ``x * keep`` is recomputed there;
* backward: ``g @ W`` plus the LoRA term folded into it, weight gradients as
  ``(r x tokens) @ (tokens x width)`` products (the fast layout).

Dropout masks come from :func:`keep_mask`: NumPy's PCG64 fills 64-bit words that give four
16-bit draws each (cheaper than ``torch``'s ``random_``), seeded from torch's generator so
``torch.manual_seed`` still makes a run reproducible. The drop rate is rounded to a multiple
of 1/65536 and the kept values are scaled by the exact inverse of the kept fraction, so the
layer's output is unbiased as with ``torch.nn.Dropout``. ``LeanDropout`` applies the same
masks where a LoRA layer falls back to PEFT's forward, in place of ``torch.nn.Dropout``'s
slower ``bernoulli_``.

Under the CPU's bf16 autocast the same function runs in bf16: ``x`` and the LoRA weights are
cast per call (their gradients flow back to the fp32 copies through the cast), the frozen base
weight is cast *once* and kept beside the layer (:func:`frozen_cast`), where autocast would
re-cast it on every use (it caches casts only of weights that train).

Used for training on the CPU only (``use_lean_lora``); any call it does not cover (evaluation,
autocast in another dtype, merged or disabled adapters, several active adapters, DoRA and
other variants, LoRA bias, quantized base layers, mixed dtypes) runs PEFT's own forward. The
layers' internals are read through :mod:`core.lora_layers`; the step profile behind this and
its effect are in docs/benchmarks-log.md ("Lean LoRA layers").
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch

from core import lora_layers

DRAW_LEVELS = 1 << 16  # each dropout draw is a uniform 16-bit integer


def keep_threshold(p: float) -> int:
    """Draws below this (out of 65536) are dropped: ``p`` rounded to a multiple of 1/65536."""
    return min(DRAW_LEVELS, max(0, round(p * DRAW_LEVELS)))


def keep_scale(p: float) -> float:
    """The inverse of the kept fraction for ``p`` as :func:`keep_mask` rounds it."""
    kept = DRAW_LEVELS - keep_threshold(p)
    return DRAW_LEVELS / kept if kept else 0.0


def keep_mask(shape, p: float, device="cpu") -> torch.Tensor:
    """A 0/1 ``uint8`` mask of ``shape``, each element 0 with probability ``p`` (rounded to a
    multiple of 1/65536), drawn from a PCG64 stream seeded from torch's default generator.

    ``uint8`` rather than ``bool``: torch's kernels for boolean operands are slow on the CPU,
    and :func:`as_float` turns this mask into a float one cheaply.
    """
    n = math.prod(shape)
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    words = np.random.PCG64(seed).random_raw((n + 3) // 4)  # uint64: four 16-bit draws each
    keep = (
        words.view(np.int16)[:n] >= keep_threshold(p) - DRAW_LEVELS // 2
    )  # draws uniform on [-32768, 32767]
    return torch.from_numpy(keep.view(np.uint8)).view(shape).to(device)


def as_float(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` in ``like``'s dtype and shape (a copy into a fresh tensor: the fast cast here)."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device).copy_(
        mask.view(like.shape)
    )


class _KeepMask(torch.autograd.Function):
    """``x * keep * scale``, saving only the 0/1 ``uint8`` mask for backward."""

    @staticmethod
    def forward(ctx, x, keep, scale: float):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * as_float(keep, x)).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return (grad * as_float(keep, grad)).mul_(ctx.scale), None, None


class LeanDropout(torch.nn.Module):
    """Inverted dropout like ``torch.nn.Dropout(p)``, with a cheaper mask on the CPU."""

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        return _KeepMask.apply(x, keep_mask(x.shape, self.p, x.device), keep_scale(self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_lean_dropout(model) -> int:
    """Swap the ``torch.nn.Dropout`` of every LoRA layer on the CPU for ``LeanDropout`` (CUDA's
    fused dropout kernel is already one pass). Returns how many were swapped."""
    changed = 0
    for module in model.modules():
        for name, dropout in lora_layers.dropouts(module).items():
            if type(dropout) is torch.nn.Dropout and dropout.p > 0 and _on_cpu(module):
                lora_layers.set_dropout(module, name, LeanDropout(dropout.p))
                changed += 1
    return changed


class _LoraLinear(torch.autograd.Function):
    """``x @ W^T + bias + s * ((x * keep * c) @ A^T) @ B^T`` with ``W`` and ``bias`` frozen
    (``keep``: a 0/1 ``uint8`` mask from :func:`keep_mask`, or None for no dropout)."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float, keep, scale: float):
        x2 = x.reshape(-1, x.shape[-1])
        dropped = x2 if keep is None else as_float(keep, x2).mul_(x2)  # one new tensor, not two
        h = dropped @ lora_a.t()  # (tokens, r)
        if keep is not None:
            h.mul_(scale)
        out = x2 @ weight.t() if bias is None else torch.addmm(bias, x2, weight.t())
        out.addmm_(h, lora_b.t(), alpha=scaling)
        ctx.save_for_backward(x, keep, h, weight, lora_a, lora_b)
        ctx.scaling, ctx.scale = scaling, scale
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x, keep, h, weight, lora_a, lora_b = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])  # (tokens, out)
        gb = (g @ lora_b).mul_(
            ctx.scaling * (ctx.scale if keep is not None else 1.0)
        )  # (tokens, r)
        x2 = x.reshape(-1, x.shape[-1])
        keep = None if keep is None else as_float(keep, x2)
        grad_x = grad_a = grad_b = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = g @ weight
            if keep is None:
                grad_x.addmm_(gb, lora_a)
            else:
                grad_x.addcmul_(gb @ lora_a, keep)
            grad_x = grad_x.view(x.shape)
        if ctx.needs_input_grad[2]:
            grad_bias = g.sum(0)
        if ctx.needs_input_grad[3]:
            dropped = (
                x2 if keep is None else keep.mul_(x2)
            )  # the float mask is not needed after this
            grad_a = gb.t() @ dropped  # (r, in)
        if ctx.needs_input_grad[4]:
            grad_b = (h.t() @ g).t().mul(ctx.scaling)  # (out, r), computed in the fast layout
        return grad_x, None, grad_bias, grad_a, grad_b, None, None, None


def _dropout_rate(dropout) -> float | None:
    """The rate of a LoRA dropout module this function can replace, else None."""
    if isinstance(dropout, torch.nn.Identity):
        return 0.0
    if type(dropout) in (torch.nn.Dropout, LeanDropout):
        return float(dropout.p)
    return None


def _plain_adapter(module, x: torch.Tensor):
    """``(LoRA parts, dropout rate, compute dtype)`` when the lean function covers this call,
    else None."""
    if not (module.training and torch.is_grad_enabled()):
        return None
    compute = _compute_dtype(x)
    name = None if compute is None else lora_layers.single_active_adapter(module)
    if name is None:
        return None
    lora = lora_layers.parts(module, name)
    base, lora_a, lora_b = lora.base, lora.a, lora.b
    if type(base) is not torch.nn.Linear or base.weight.requires_grad or lora.fan_in_fan_out:
        return None
    if lora_layers.has_lora_bias(module, name) or (
        base.bias is not None and base.bias.requires_grad
    ):
        return None
    weights = {base.weight.dtype, lora_a.weight.dtype, lora_b.weight.dtype}
    if torch.is_autocast_enabled(x.device.type):  # fp32 weights, cast to the compute dtype
        if weights != {torch.float32} or x.dtype not in (torch.float32, compute):
            return None
    elif weights != {x.dtype}:
        return None
    rate = _dropout_rate(lora.dropout)
    return None if rate is None else (lora, rate, compute)


def cpu_bf16_autocast(kind: str) -> bool:
    """Whether autocast is on for device type ``kind`` and is the CPU's bf16 one."""
    return (
        kind == "cpu"
        and torch.is_autocast_enabled(kind)
        and torch.get_autocast_dtype(kind) == torch.bfloat16
    )


def _compute_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype a lean call computes in: ``x``'s without autocast, bf16 under the CPU's bf16
    autocast, None (PEFT's forward) under any other autocast."""
    kind = x.device.type
    if not torch.is_autocast_enabled(kind):
        return x.dtype
    return torch.bfloat16 if cpu_bf16_autocast(kind) else None


def frozen_cast(module, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight`` (frozen) in ``dtype``, cast once and kept on ``module`` until the weight
    changes (its storage or its version counter). Made outside inference mode even when asked
    inside it (a validation pass), so a training step may save it for backward later."""
    if weight.dtype == dtype:
        return weight
    key = (weight.data_ptr(), weight._version, dtype)
    kept = module.__dict__.get("_lean_frozen_cast")
    if kept is None or kept[0] != key:
        with torch.inference_mode(False):
            kept = module.__dict__["_lean_frozen_cast"] = (key, weight.detach().to(dtype))
    return kept[1]


def lean_lora_forward(self, x, *args, **kwargs):
    """Forward of a PEFT LoRA ``Linear`` through ``_LoraLinear`` when the call allows it."""
    plan = None if (args or kwargs) else _plain_adapter(self, x)
    if plan is None:
        return type(self).forward(self, x, *args, **kwargs)
    lora, rate, compute = plan
    base = lora.base
    keep = keep_mask(x.shape, rate, x.device) if rate > 0 else None
    weight, bias, lora_a, lora_b = base.weight, base.bias, lora.a.weight, lora.b.weight
    if compute == weight.dtype:
        return _LoraLinear.apply(
            x, weight, bias, lora_a, lora_b, lora.scaling, keep, keep_scale(rate)
        )
    weight, bias = frozen_cast(base, weight, compute), None if bias is None else bias.to(compute)
    with torch.autocast(x.device.type, enabled=False):
        return _LoraLinear.apply(
            x.to(compute),
            weight,
            bias,
            lora_a.to(compute),
            lora_b.to(compute),
            lora.scaling,
            keep,
            keep_scale(rate),
        )


def use_lean_lora(model) -> int:
    """Route every PEFT LoRA ``Linear`` of ``model`` on the CPU through ``lean_lora_forward``
    (calls it does not cover fall back to PEFT's forward). Returns how many were routed."""
    linear = lora_layers.lora_linear_class()
    changed = 0
    for module in model.modules():
        if type(module) is linear and _on_cpu(module):
            module.forward = types.MethodType(lean_lora_forward, module)
            changed += 1
    return changed


def _on_cpu(module) -> bool:
    return next(module.parameters()).device.type == "cpu"
