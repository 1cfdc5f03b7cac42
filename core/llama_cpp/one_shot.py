"""One-shot requests to a :class:`~core.llama_cpp.process.LlamaServerProcess`, for checks:
GGUF export's agreement with PyTorch and the tests (greedy tokens, the next token's
log-probabilities, llama.cpp's own tokenization). The completions bypass the prompt cache and
name the LoRA they apply (at scale 1, the others at 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from core.llama_cpp.process import LlamaServerProcess


def _lora_scales(count: int, lora: int | None) -> list[dict]:
    return [{"id": i, "scale": 1.0 if i == lora else 0.0} for i in range(count)]


def greedy(
    server: LlamaServerProcess, ids: list[int], max_new: int, lora: int | None = None
) -> tuple[list[int], bool]:
    """Argmax continuation of token ids ``ids`` (``lora``: the index of the LoRA applied at
    scale 1); True when it ended at a token the file marks end-of-generation."""
    body = {
        "prompt": ids,
        "n_predict": max_new,
        "top_k": 1,
        "samplers": ["top_k"],
        "cache_prompt": False,
        "return_tokens": True,
        "lora": _lora_scales(len(server.loras), lora),
    }
    reply = httpx.post(f"{server.url}/completion", json=body, headers=server.headers, timeout=300)
    reply.raise_for_status()
    answer = reply.json()
    return list(answer.get("tokens") or []), answer.get("stop_type") == "eos"


def top_logprobs(
    server: LlamaServerProcess, ids: list[int], n: int = 20, lora: int | None = None
) -> dict[int, float]:
    """The ``n`` likeliest next tokens after ``ids`` and their log-probabilities, from the
    whole distribution (before any sampling)."""
    body = {
        "prompt": ids,
        "n_predict": 1,
        "n_probs": n,
        "post_sampling_probs": False,
        "cache_prompt": False,
        "top_k": 1,
        "samplers": ["top_k"],
        "lora": _lora_scales(len(server.loras), lora),
    }
    reply = httpx.post(f"{server.url}/completion", json=body, headers=server.headers, timeout=300)
    reply.raise_for_status()
    probs = reply.json()["completion_probabilities"][0]["top_logprobs"]
    return {int(p["id"]): float(p["logprob"]) for p in probs}


def tokenize(server: LlamaServerProcess, text: str) -> list[int]:
    """llama.cpp's own token ids of ``text`` (control tokens parsed, no BOS added)."""
    reply = httpx.post(
        f"{server.url}/tokenize",
        json={"content": text, "add_special": False, "parse_special": True},
        headers=server.headers,
        timeout=60,
    )
    reply.raise_for_status()
    return [t if isinstance(t, int) else t["id"] for t in reply.json()["tokens"]]
