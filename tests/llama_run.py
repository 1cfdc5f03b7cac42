"""Running GGUF files in llama.cpp's own ``llama-server`` for the tests."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import numpy as np
import pytest

from core.llama_cpp import process
from core.llama_cpp.binaries import missing_reason, server_binary


def llama_or_skip() -> Path:
    """The llama-server executable; the test skips with the reason when it is not built."""
    binary = server_binary()
    if binary is None:
        pytest.skip(missing_reason())
    return binary


@contextlib.contextmanager
def served(path, lora=None, n_ctx: int = 512):
    """A llama-server on GGUF ``path`` (and a LoRA GGUF, id 0, unmerged), stopped after."""
    binary = llama_or_skip()
    with tempfile.TemporaryDirectory(prefix="tunedesk-llama-test-") as logs, \
            process.LlamaServerProcess(binary, path, [lora] if lora else [], slots=1, ctx_per_slot=n_ctx,
                                       threads=2, log=Path(logs) / "llama-server.log") as server:
        yield server


def logprob_gap(server, ids: list[int], torch_logits: np.ndarray, n: int = 20) -> tuple[float, bool]:
    """How far llama.cpp's next-token log-probabilities after ``ids`` are from those of
    ``torch_logits``: the largest absolute gap over llama.cpp's ``n`` likeliest tokens, and
    whether both put the same token first. The LoRA (if any) applies at scale 1."""
    got = process.top_logprobs(server, ids, n, lora=0 if server.loras else None)
    shifted = torch_logits - torch_logits.max()
    want = shifted - np.log(np.exp(shifted).sum())
    gap = max(abs(lp - float(want[token])) for token, lp in got.items())
    return gap, max(got, key=got.get) == int(torch_logits.argmax())
