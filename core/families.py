"""What TuneDesk knows about each model family: LoRA targets and the fast paths proven on it.

A family is a transformers ``model_type``. Each one names its own projection modules (Phi-3
fuses query/key/value into ``qkv_proj`` and gate/up into ``gate_up_proj``; GPT-2 has Conv1D
``c_attn``), and says which of training's fast paths it may take:

- ``lean_swiglu``: ``finetune.train.fused``'s SwiGLU (``silu(gate) * up``); a family whose MLP
  is not SiLU-gated (Gemma 3's GELU-tanh) or is fused (Phi-3's ``gate_up_proj``) has none.
- ``lean_head``: the chunked cross-entropy against the LM head's weight. It replaces the head
  by a passthrough inside the model's forward, so what the model does after the head still
  happens (Granite divides by ``logits_scaling``: the hidden states come out divided, and
  ``(h / s) @ W`` is ``(h @ W) / s``); logit soft-capping is refused in ``fused.lean_head``.
- ``short_rows``: ``finetune.train.cpu_attention``'s plain products for short bf16 rows; it
  takes the scale the model passes (Gemma 3's ``query_pre_attn_scalar``, Granite's
  ``attention_multiplier``) and sdpa's masks (sliding windows included).

A path is on for a family only after a training step through it gave the plain step's loss
and gradients on a tiny model of that family (tests/finetune/train/test_family_paths.py,
Mistral and Gemma 3 with windows shorter than the rows). An unknown family gets none of them
but the lean LoRA layers (which only see a linear layer's input, whatever the model around it
does), and LoRA on every linear layer. No torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass

LLAMA_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
LLAMA_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Family:
    """One model family's LoRA targets and which training fast paths it may take."""

    attention: tuple[str, ...]  # LoRA targets in attention
    mlp: tuple[str, ...]  # LoRA targets in the MLP (with LoRA's include_mlp)
    lean_swiglu: bool = False
    lean_head: bool = False
    short_rows: bool = False


_ALL = {"lean_swiglu": True, "lean_head": True, "short_rows": True}

FAMILIES: dict[str, Family] = {
    "llama": Family(LLAMA_ATTN, LLAMA_MLP, **_ALL),  # Llama 2/3.x, SmolLM2
    "mistral": Family(LLAMA_ATTN, LLAMA_MLP, **_ALL),
    "qwen2": Family(LLAMA_ATTN, LLAMA_MLP, **_ALL),
    "qwen3": Family(
        LLAMA_ATTN, LLAMA_MLP, **_ALL
    ),  # q/k norms inside attention, before the products
    "smollm3": Family(LLAMA_ATTN, LLAMA_MLP, **_ALL),
    "granite": Family(LLAMA_ATTN, LLAMA_MLP, **_ALL),  # multipliers: see lean_head above
    "gemma3_text": Family(LLAMA_ATTN, LLAMA_MLP, lean_head=True, short_rows=True),  # GELU-tanh MLP
    "phi3": Family(
        ("qkv_proj", "o_proj"), ("gate_up_proj", "down_proj"), lean_head=True, short_rows=True
    ),
    "gpt2": Family(
        ("c_attn", "c_proj"), ("c_fc",), lean_head=True
    ),  # Conv1D, GELU MLP, eager attention
}


def family(model_type: str) -> Family | None:
    """The family of a config's ``model_type``; None when TuneDesk has not checked it."""
    return FAMILIES.get(model_type)


def lora_targets(model_type: str, include_mlp: bool) -> list[str] | None:
    """The LoRA target names for ``model_type`` (attention, then MLP); None when unknown."""
    found = family(model_type)
    if found is None:
        return None
    return list(found.attention) + (list(found.mlp) if include_mlp else [])


def allows(model_type: str, path: str) -> bool:
    """Whether the fast path ``path`` (``lean_swiglu``, ``lean_head``, ``short_rows``) was
    proven equal to the plain path for ``model_type``."""
    found = family(model_type)
    return found is not None and bool(getattr(found, path))
