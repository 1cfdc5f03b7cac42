"""Fixtures for the serving tests: a tiny model with three seeded adapters on the shelf."""

from __future__ import annotations

import pytest
from serve_helpers import put_adapters


@pytest.fixture
def session(home, varied_dir):
    """A float32 session on the tiny llama with adapters a, b, c on the shelf."""
    from inference.session import ModelSession

    put_adapters(home, varied_dir)
    return ModelSession(str(varied_dir), dtype="float32")


@pytest.fixture(scope="session")
def realtok_dir(default_model_dir, tmp_path_factory):
    """A 2-layer llama with the default model's tokenizer and chat template (llama.cpp's
    converter refuses the byte-level BPE the other tiny models use), weights large enough
    that greedy answers are varied text."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    folder = tmp_path_factory.mktemp("tiny-realtok")
    tok = AutoTokenizer.from_pretrained(default_model_dir.path)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
                         vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.15)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
