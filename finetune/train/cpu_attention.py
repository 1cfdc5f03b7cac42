"""Attention for bf16 training on the CPU: plain products for short rows, sdpa for long ones.

Under the CPU's bf16 autocast, PyTorch's sdpa runs its CPU flash kernel, whose backward is
slow on short rows: a large share of a training step for a small share of its FLOPs.
transformers' eager attention (two bf16 batched products and an fp32 softmax) is faster on
short rows and slower on long ones (it keeps every (T x T) score matrix for backward); in
fp32 the two are alike (docs/benchmarks.md). So :func:`short_row_attention` takes the
products for bf16 rows of at most :data:`SHORT_ROW_TOKENS` keys and hands everything else to
transformers' sdpa, with sdpa's own masks (``None`` for causal rows without padding, else a
boolean (B, 1, T, S) mask, True where a query may attend).

Registered under :data:`NAME` with transformers' attention and mask interfaces;
:func:`use_short_row_attention` switches a training model to it on the CPU, for the
families whose attention is plain causal softmax attention (no soft-capping, no sinks, no
extra scales: ``core.families``' ``short_rows``).
"""

from __future__ import annotations

import torch

from core import families
from finetune.train.lean_lora import cpu_bf16_autocast

NAME = "tunedesk_short_rows"
SHORT_ROW_TOKENS = 192  # products measured faster at 128 keys, equal at 256, slower at 512

_registered = False


def short_row_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """One attention call: products and softmax for short bf16 rows, else transformers' sdpa.

    Args:
        query: (B, H, T, D); key, value: (B, H_kv, S, D).
        attention_mask: sdpa's mask: None (causal) or boolean (B, 1, T, S), True = attend.

    Returns:
        ``(output (B, T, H, D), None)`` as transformers' attention functions return it.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # bf16 tensors, or the CPU's bf16 autocast (rotary embeddings hand it fp32 queries)
    in_bf16 = query.dtype == torch.bfloat16 or cpu_bf16_autocast(query.device.type)
    short = in_bf16 and key.shape[2] <= SHORT_ROW_TOKENS
    if not short or kwargs.get("softcap") is not None or kwargs.get("output_attentions"):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = torch.matmul(query * scaling, key.transpose(2, 3))  # (B, H, T, S)
    allowed = attention_mask
    if allowed is None:  # causal; queries are the last T of the S positions
        t, s = scores.shape[-2:]
        allowed = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril(s - t)
    elif allowed.dtype != torch.bool:  # an additive float mask
        allowed = allowed == 0
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    if dropout and module.training:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make :data:`NAME` known to transformers (attention and masks); idempotent."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, short_row_attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    return NAME


def use_short_row_attention(model) -> bool:
    """Switch a CPU training model from sdpa to :func:`short_row_attention`.

    Only for the families ``core.families`` allows it on the CPU, whose attention is sdpa now;
    returns whether it switched.
    """
    config = model.config
    on_cpu = next(model.parameters()).device.type == "cpu"
    if not on_cpu or not families.allows(config.model_type, "short_rows"):
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    model.set_attn_implementation(register())
    return True
