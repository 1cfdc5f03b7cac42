"""The chat and compare rows of ``python -m bench gpu-check``, run in their own process.

They load the base model on CUDA through :class:`inference.session.ModelSession`, as the app
does, and answer with the adapter that the suite's bf16 row just trained: streamed chat for
"chat", one batched base-vs-adapter call for "compare".
"""

from __future__ import annotations

import time

PROMPT = [{"role": "user", "content": "Where is my order? It has not arrived yet."}]
NEW_TOKENS = 32


def run_row(spec: dict) -> dict:
    """``{"passed", "tokens_per_s", "peak_memory_gib", "answer", "dtype", ...}`` for one row.

    Args:
        spec: ``kind`` ("chat" or "compare"), ``model`` (base folder or name), ``adapter``,
            and ``device`` ("cuda" unless given; the tests use "cpu").
    """
    import torch

    from inference.generate import GenerationSettings, compare, stream_chat
    from inference.session import ModelSession

    device = spec.get("device", "cuda")
    session = ModelSession(spec["model"], device=device, dtype="auto")
    session.load()
    on_device = next(session.model.parameters()).device.type == device.split(":")[0]
    peak = (
        (lambda: torch.cuda.max_memory_allocated() / 2**30)
        if device.startswith("cuda")
        else (lambda: None)
    )
    # A fixed answer length, so tokens/s compares between runs (random weights rarely stop).
    settings = GenerationSettings(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if spec["kind"] == "chat":
        texts = list(stream_chat(session, PROMPT, spec["adapter"], settings))
        seconds, tokens, answers = time.perf_counter() - t0, NEW_TOKENS, [texts[-1]]
        # The streamer releases text at word ends, so an answer without spaces (random
        # weights) arrives as one piece: the check is that an answer arrived, on the GPU.
        passed = bool(texts and texts[-1])
    else:
        got = compare(session, PROMPT, [None, spec["adapter"]], settings)
        seconds, tokens, answers = (
            time.perf_counter() - t0,
            sum(a.tokens for a in got),
            [a.text for a in got],
        )
        passed = [a.adapter for a in got] == ["base", spec["adapter"]] and all(
            a.tokens > 0 for a in got
        )
    return {
        "passed": bool(passed and on_device),
        "tokens_per_s": tokens / seconds,
        "peak_memory_gib": peak(),
        "mfu": None,
        "answer": answers[-1],
        "dtype": session.dtype,
        "on_device": on_device,
    }
