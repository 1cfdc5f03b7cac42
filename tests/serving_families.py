"""Tiny sliding-window models for the serving tests (Gemma 3, Mistral on the tests' tiny tokenizer);
the six families with their own templates for the end-to-end tests are in family_models.py.
Tiny random models of other families, for the serving tests: built from each family's
transformers config (2 layers, hidden 64) with the tiny llama's byte-level tokenizer and ChatML
template (tests/conftest.py), weights large enough that greedy answers are varied text.

Named ``serving_family_dir`` so it can sit beside (or merge with) the family builders of the
training tests; the point here is the sliding window the batching scheduler must honour: Gemma 3's
local (sliding-window) layers and Mistral's sliding window.
"""

from __future__ import annotations

from pathlib import Path

SERVING_FAMILIES = ("gemma3", "mistral")
# Weight spread (embeddings, linear layers) for varied greedy text: Gemma scales its embeddings
# by sqrt(hidden), so with equal spreads the last prompt token ("\n") wins every step.
STDS = {"gemma3": (0.02, 0.5), "mistral": (0.2, 0.2)}
# tokens a sliding-window layer sees: more than a greeting, less than a question and its answer
WINDOW = 24


def _config(family: str, tok):
    from transformers import Gemma3TextConfig, MistralConfig

    shared = {
        "vocab_size": len(tok),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 256,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "tie_word_embeddings": True,
    }
    if family == "gemma3":  # one local (sliding) layer, one global, as Gemma 3 alternates them
        return Gemma3TextConfig(
            **shared, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]
        )
    if family == "mistral":
        return MistralConfig(**shared, sliding_window=WINDOW)
    raise ValueError(f"no tiny serving model for {family!r}; one of {', '.join(STDS)}")


def serving_family_dir(family: str, folder: Path, tokenizer_dir: Path) -> Path:
    """Save a tiny random ``family`` model (``SERVING_FAMILIES``) with the tokenizer of
    ``tokenizer_dir`` into ``folder``; returns ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(family, tok))
    embedding_std, linear_std = STDS[family]
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.normal_(0, embedding_std if "embed" in name else linear_std)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
