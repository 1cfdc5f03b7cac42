"""Running GGUF files in llama.cpp (through the ``llama_cpp`` bindings) for the tests."""

from __future__ import annotations

import numpy as np
import pytest


def llama_or_skip():
    """The bindings' module; the test skips with a reason when they are not built."""
    try:
        import llama_cpp
    except ImportError as err:
        pytest.skip(f"llama_cpp bindings not installed ({err}); run `make llama`")
    return llama_cpp


def load(path, lora=None, n_ctx=512):
    """A llama.cpp model (and optional LoRA GGUF applied on top, unmerged)."""
    from adapters.export.llama_tools import open_model

    llama_or_skip()
    kwargs = {"lora_path": str(lora)} if lora else {}
    return open_model(path, n_ctx=n_ctx, n_threads=2, verbose=False, **kwargs)


def last_logits(llm, ids: list[int]) -> np.ndarray:
    """llama.cpp's next-token logits after ``ids`` (evaluated from scratch)."""
    llm.reset()
    llm.eval(ids)
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()


def greedy(llm, ids: list[int], max_new: int, stop_ids: set[int]) -> tuple[list[int], bool]:
    """Greedy continuation (argmax of llama.cpp's logits); True when it ended at a stop id."""
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(max_new):
        tok = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))))
        if tok in stop_ids:
            return out, True
        out.append(tok)
        llm.eval([tok])
    return out, False
