"""Compare on llama.cpp: each pane on its own context, decoding side by side.

A llama.cpp context applies one LoRA set to every sequence it decodes, so base and tuned
answers cannot share one batch the way PyTorch + PEFT rows do. Instead each pane gets a
sibling context (the same memory-mapped GGUF weights, its own KV cache) and the machine's
cores are split between the panes. Measured on 2 cores without AVX512 (docs/benchmarks.md):
two one-thread contexts side by side take about 1.6x one two-thread answer, where the same
two answers one after the other take about 2.1x.
"""

from __future__ import annotations

import threading

from adapters.export.gguf_cache import lora_weights_hash
from inference.generate import Answer, GenerationSettings
from serve.interface.ticket import answers_together
from serve.llama_engine import LlamaEngine

MAX_PANES = 3  # the Compare tab's panes: the base and up to two adapters


class LlamaCompare:
    """Answers one conversation with several adapters at once on llama.cpp.

    Args:
        engine: the llama.cpp engine that serves Chat; its siblings are built on first use
            and kept (one per pane), so a Compare never waits behind a chat.
        base_hash: the base weight hash the base pane is labelled with (an adapter pane is
            labelled with the hash of the weights its LoRA GGUF was converted from).
    """

    def __init__(self, engine: LlamaEngine, base_hash: str):
        self.engine, self.base_hash = engine, base_hash
        self._panes: list[LlamaEngine] = []
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return self.engine.label

    def panes(self, n: int) -> list[LlamaEngine]:
        """``n`` sibling contexts, built once each."""
        if not 1 <= n <= MAX_PANES:
            raise ValueError(f"compare takes 1 to {MAX_PANES} answers, got {n}")
        with self._lock:
            while len(self._panes) < n:
                self._panes.append(self.engine.sibling())
            return self._panes[:n]

    def threads_per_pane(self, n: int) -> int:
        return max(1, self.engine.threads // n)

    def compare(self, messages: list[dict], adapters: list[str | None],
                settings: GenerationSettings | None = None) -> list[Answer]:
        """Every pane's answer; ``seconds`` is the wall time until the last pane was done.

        Raises:
            ValueError: bad settings or messages, an unusable adapter (before any decoding).
        """
        settings = settings or GenerationSettings()
        settings.check()
        panes = self.panes(len(adapters))
        # Every adapter checked (and a new one converted) before any pane starts decoding.
        files = [pane.lora_file(a) for pane, a in zip(panes, adapters, strict=True)]
        hashes = [self.base_hash if f is None else lora_weights_hash(f) for f in files]
        threads = self.threads_per_pane(len(adapters))
        return answers_together([lambda p=pane, a=a: p.submit(messages, a, settings, threads=threads)
                                 for pane, a in zip(panes, adapters, strict=True)], hashes)

    def close(self) -> None:
        with self._lock:
            for pane in self._panes:
                pane.close()
            self._panes.clear()
