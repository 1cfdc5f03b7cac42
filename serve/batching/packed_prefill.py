"""Newcomers' prompts prefilled without padding: every projection and MLP sees real tokens only.

Prompts of different lengths prefilled together are left-padded to the longest, and every
padding slot goes through all the model's projections: 16 support questions of 16-27 new
tokens each (339 in all) ran as 16 x 27 = 432 rows, 27 % of the work thrown away. Here the
real tokens are laid side by side in ONE row ``(1, tokens)``, so embeddings, norms,
projections and MLPs run on them alone; only attention needs the rows apart, so each
Llama attention layer (``LlamaAttention``; other kinds keep the padded prefill) scatters its
rotated queries, keys and values into the padded ``(rows, heads, width, head_dim)`` layout,
updates the same padded KV cache and runs transformers' attention with the same mask the
padded prefill would build (``create_causal_mask`` on the padded shapes), then gathers the
real tokens back for ``o_proj``. Every row computes exactly what it computes padded: oneDNN's
projections are row-invariant and the attention inputs are the same numbers (padding slots
hold zeros instead of values computed from the pad token; the mask hides both).

Rows must come grouped by adapter for a mix of adapters (the scheduler sorts newcomers so):
each adapter's LoRA update then covers one run of tokens (``row_routing.py``).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def can_pack(model) -> bool:
    """Whether ``model``'s attention layers are all ``LlamaAttention`` (what the override knows)."""
    from transformers.models.llama.modeling_llama import LlamaAttention

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(inner, "model", None), "layers", None)
    return bool(layers) and all(
        type(getattr(layer, "self_attn", None)) is LlamaAttention for layer in layers
    )


class _Layout:
    """Where each real token of the padded ``(rows, width)`` batch sits in the packed row."""

    def __init__(self, padded: dict):
        self.rows, self.width = padded["input_ids"].shape
        mask = padded["attention_mask"][:, -self.width :].to(torch.long)  # the prompts' columns
        self.real = mask.reshape(-1).nonzero().view(-1)  # flat (row * width + column) per token
        self.counts = mask.sum(dim=1).tolist()
        self.last = torch.cumsum(mask.sum(dim=1), 0) - 1  # each row's last token, packed
        self.position_ids = padded["position_ids"]

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """(1, heads, tokens, dim) -> (rows, heads, width, dim), zeros where padding is."""
        heads, dim = packed.shape[1], packed.shape[3]
        flat = packed.new_zeros(self.rows * self.width, heads, dim)
        flat[self.real] = packed[0].transpose(0, 1)
        return flat.view(self.rows, self.width, heads, dim).transpose(1, 2)

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """(rows, width, features) -> (1, tokens, features): the real tokens only."""
        return padded.reshape(self.rows * self.width, -1)[self.real].unsqueeze(0)


def _attention_mask(model, padded: dict, layout: _Layout):
    """The mask transformers builds for the padded prefill (None where it needs none)."""
    from transformers.masking_utils import create_causal_mask

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    dtype = next(inner.parameters()).dtype
    shape_only = torch.empty(layout.rows, layout.width, 1, dtype=dtype)
    return create_causal_mask(
        config=inner.config,
        inputs_embeds=shape_only,
        attention_mask=padded["attention_mask"],
        past_key_values=padded.get("past_key_values"),
        position_ids=layout.position_ids,
    )


@contextmanager
def _packed_attention(model, layout: _Layout, mask):
    """While open, every attention layer takes the packed row (see the module docstring)."""
    from transformers.models.llama.modeling_llama import (
        ALL_ATTENTION_FUNCTIONS,
        apply_rotary_pos_emb,
        eager_attention_forward,
    )

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model

    def attention_of(module):
        def forward(
            hidden_states,
            position_embeddings=None,
            attention_mask=None,
            past_key_values=None,
            **kwargs,
        ):
            heads = (1, hidden_states.shape[1], -1, module.head_dim)
            query = module.q_proj(hidden_states).view(heads).transpose(1, 2)
            key = module.k_proj(hidden_states).view(heads).transpose(1, 2)
            value = module.v_proj(hidden_states).view(heads).transpose(1, 2)
            cos, sin = position_embeddings
            query, key = apply_rotary_pos_emb(query, key, cos, sin)
            query, key, value = layout.pad(query), layout.pad(key), layout.pad(value)
            key, value = past_key_values.update(key, value, module.layer_idx)
            attend = ALL_ATTENTION_FUNCTIONS.get_interface(
                module.config._attn_implementation, eager_attention_forward
            )
            kwargs["position_ids"] = layout.position_ids
            output, weights = attend(
                module, query, key, value, mask, dropout=0.0, scaling=module.scaling, **kwargs
            )
            return module.o_proj(layout.unpad(output)), weights  # output: (rows, width, heads, dim)

        return forward

    swapped = []
    try:
        for layer in inner.model.layers:
            layer.self_attn.forward = attention_of(layer.self_attn)
            swapped.append(layer.self_attn)
        yield
    finally:
        for module in swapped:
            del module.forward


def packed_prefill(model, forward, pefts: list, padded: dict):
    """The padded prefill ``padded`` (``batch_cache.prefill_inputs``' arguments) run packed.

    Args:
        model: the session's model (its attention layers are swapped for the call).
        forward: ``forward(pefts, inputs, tokens=..., logits_to_keep=...)``, the step router's.
        pefts: each row's PEFT adapter (None: the base), rows grouped by adapter.

    Returns:
        (cache, last logits): the padded rows' KV cache, as the padded prefill leaves it, and
        each row's logits at its last prompt token, (rows, vocab).
    """
    from transformers.cache_utils import DynamicCache

    layout = _Layout(padded)
    mask = _attention_mask(model, padded, layout)
    cache = padded.get("past_key_values") or DynamicCache()
    inputs = {
        "input_ids": padded["input_ids"].reshape(-1)[layout.real].unsqueeze(0),
        "position_ids": layout.position_ids.reshape(-1)[layout.real].unsqueeze(0),
        "past_key_values": cache,
        "use_cache": True,
    }
    with _packed_attention(model, layout, mask):
        out = forward(pefts, inputs, tokens=layout.counts, logits_to_keep=layout.last)
    return cache, out.logits[0]
