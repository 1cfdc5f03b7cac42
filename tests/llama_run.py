"""Running GGUF files in llama.cpp's own ``llama-server`` for the tests."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from core.llama_cpp import one_shot, process
from core.llama_cpp.binaries import missing_reason, server_binary


def llama_or_skip() -> Path:
    """The llama-server executable; the test skips with the reason when it is not built."""
    binary = server_binary()
    if binary is None:
        pytest.skip(missing_reason())
    return binary


def tiny_realtok_model(tokenizer_dir, folder: Path) -> Path:
    """A 2-layer llama in ``folder`` with the tokenizer and chat template of ``tokenizer_dir``
    (the default model's: llama.cpp's converter refuses the byte-level BPE the other tiny models
    use), weights large enough that greedy answers are varied text."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.15)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def default_model_gguf(model, home: Path) -> Path:
    """The default model's Q8_0 GGUF, made by the export code: kept in the developer's
    TUNEDESK_TEST_MODEL_CACHE home when that is set (`make test` sets it), else in ``home``."""
    from adapters.export.gguf_cache import ensure_base_gguf

    cache = os.environ.get("TUNEDESK_TEST_MODEL_CACHE")
    return ensure_base_gguf(model, "q8_0", home=Path(cache) if cache else home)


@contextlib.contextmanager
def served(path, lora=None, n_ctx: int = 512):
    """A llama-server on GGUF ``path`` (and a LoRA GGUF, id 0, unmerged), stopped after."""
    binary = llama_or_skip()
    with (
        tempfile.TemporaryDirectory(prefix="tunedesk-llama-test-") as logs,
        process.LlamaServerProcess(
            binary,
            path,
            [lora] if lora else [],
            slots=1,
            ctx_per_slot=n_ctx,
            threads=2,
            log=Path(logs) / "llama-server.log",
        ) as server,
    ):
        yield server


def logprob_gap(
    server, ids: list[int], torch_logits: np.ndarray, n: int = 20
) -> tuple[float, bool]:
    """How far llama.cpp's next-token log-probabilities after ``ids`` are from those of
    ``torch_logits``: the largest absolute gap over llama.cpp's ``n`` likeliest tokens, and
    whether both put the same token first. The LoRA (if any) applies at scale 1."""
    got = one_shot.top_logprobs(server, ids, n, lora=0 if server.loras else None)
    shifted = torch_logits - torch_logits.max()
    want = shifted - np.log(np.exp(shifted).sum())
    gap = max(abs(lp - float(want[token])) for token, lp in got.items())
    return gap, max(got, key=got.get) == int(torch_logits.argmax())
