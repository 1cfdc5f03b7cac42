"""Keys and values of earlier conversations, reused by prompts that begin the same way.

Support chats share long beginnings: the chat template's header and the bot's system prompt
in every conversation, and a conversation's whole history at each new turn. A token's keys
and values depend only on the tokens before it (and on the weights), so once a prompt has
been prefilled, any later prompt for the same adapter that begins with the same tokens can
take those columns instead of computing them again (vLLM's automatic prefix caching and
llama.cpp's prompt cache do the same). On a CPU every prompt token costs prefill time, so a
template header is paid on every request and a long chat's history again at every turn.

Entries are kept per adapter *version* (its name and weights hash; the base as ``None``): an
adapter changes every layer's keys and values, and a retrained adapter must not meet its
predecessor's. The scheduler stores each prompt after its prefill and each conversation
(prompt + answer) when its answer ends; a stored sequence replaces the stored ones it extends.
Least recently used entries go first once ``max_bytes`` is reached.

    entry keys / values: (layers, kv_heads, tokens, head_dim), in the model's dtype
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

MIN_REUSE = 16  # shorter shared beginnings are prefilled again (not worth a cache join)
MEMORY_SHARE = 0.1  # of MemAvailable at start, at most, for stored keys and values


@dataclass(eq=False)
class Hit:
    """The reusable beginning of a prompt: ``tokens`` columns of one stored entry."""

    tokens: int
    keys: torch.Tensor  # (layers, kv_heads, tokens, head_dim), a view of the entry
    values: torch.Tensor


@dataclass(eq=False)
class _Entry:
    ids: np.ndarray
    keys: torch.Tensor
    values: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.ids.nbytes


class PrefixCache:
    """Stored keys and values by (adapter version, token sequence); thread-safe.

    Args:
        max_bytes: memory the entries may hold together (0 turns the cache off).
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = self.hits = self.reused_tokens = self.lookups = 0

    def lookup(self, adapter: tuple | None, prompt: list[int]) -> Hit | None:
        """The longest stored beginning of ``prompt`` for ``adapter``, leaving at least one
        prompt token to prefill (its logits give the first answer token); None below
        ``MIN_REUSE`` tokens."""
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_key = 0, None
        with self._lock:
            self.lookups += 1
            for key, entry in self._entries.items():
                if key[0] == adapter:
                    shared = _common_length(entry.ids, ids)
                    if shared > best:
                        best, best_key = shared, key
            best = min(best, len(prompt) - 1)
            if best < MIN_REUSE:
                return None
            entry = self._entries[best_key]
            self._entries.move_to_end(best_key)
            self.hits += 1
            self.reused_tokens += best
        return Hit(best, entry.keys[:, :, :best], entry.values[:, :, :best])

    def store(
        self, adapter: tuple | None, tokens: list[int], keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Keep ``keys``/``values`` (layers, kv_heads, len(tokens), head_dim) of ``tokens``;
        entries of the same adapter that this sequence extends are dropped."""
        if len(tokens) < MIN_REUSE or self.max_bytes <= 0:
            return
        entry = _Entry(np.asarray(tokens, dtype=np.int64), keys, values)
        if entry.nbytes > self.max_bytes:
            return
        with self._lock:
            for key in [
                k
                for k, e in self._entries.items()
                if k[0] == adapter
                and len(e.ids) <= len(entry.ids)
                and _common_length(e.ids, entry.ids) == len(e.ids)
            ]:
                self._forget(key)
            key = (adapter, entry.ids.tobytes())
            self._entries[key] = entry
            self.bytes += entry.nbytes
            while self.bytes > self.max_bytes:
                self._forget(next(iter(self._entries)))

    def clear(self) -> None:
        """Forget every entry and reset the counts."""
        with self._lock:
            self._entries.clear()
            self.bytes = self.hits = self.reused_tokens = self.lookups = 0

    def status(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self.bytes,
                "hits": self.hits,
                "lookups": self.lookups,
                "reused_tokens": self.reused_tokens,
            }

    def _forget(self, key: tuple) -> None:
        self.bytes -= self._entries.pop(key).nbytes


def _common_length(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
