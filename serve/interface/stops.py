"""Text-level pieces every engine shares: incremental detokenizing and OpenAI ``stop`` strings."""

from __future__ import annotations

import codecs


class StopText:
    """Cuts a stream of text deltas at the first of the ``stop`` strings.

    Text that might be the start of a stop string is held back until the next delta decides;
    what is returned is always safe to send. After a hit, :attr:`hit` is True and everything
    later is dropped (OpenAI leaves the stop string out of the answer).
    """

    def __init__(self, stop: list[str] | None = None):
        self.stop = [s for s in (stop or []) if s]
        self.hit = False
        self._held = ""

    def feed(self, delta: str) -> str:
        """The part of ``held + delta`` that can be sent now."""
        if self.hit or not self.stop:
            return "" if self.hit else delta
        text = self._held + delta
        cuts = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if cuts:
            self.hit, self._held = True, ""
            return text[: min(cuts)]
        keep = max((_overlap(text, s) for s in self.stop), default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What is still held back once the answer ended without a stop string."""
        held, self._held = self._held, ""
        return "" if self.hit else held


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``stop``."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0


class Utf8Pieces:
    """Bytes of token pieces in, whole characters out: a character split across two tokens
    (byte-level BPE does that to emoji and accents) is held until its last byte arrives."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
