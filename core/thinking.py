"""Reasoning blocks kept out of answers: Qwen3's ``<think> ... </think>``.

A support answer is what the customer reads. Qwen3 (and other reasoning models) may open an
answer with a ``<think>`` block; its real tokenizer keeps ``<think>`` and ``</think>`` as
ordinary added tokens, so decoding with ``skip_special_tokens`` leaves them in the text.
Prompts ask for no thinking (``core.templates.TEMPLATE_OPTIONS``: Qwen3's template then writes
an empty block into the prompt itself), and whatever block a model still opens its answer
with is dropped here, in every engine's text: the whole block, its tags and the blank lines
after it. Text that may still turn into the opening tag is held back until it cannot.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def visible_answer(text: str, final: bool = True) -> str:
    """``text`` without a reasoning block at its start.

    Args:
        text: the answer so far (or whole).
        final: the answer is complete. While it is not, an unclosed block, or a start that
            could still become ``<think>``, shows as nothing yet. A block that never closed
            hides the rest of the answer: the model was still thinking when it was cut off.
    """
    body = text.lstrip()
    if body.startswith(OPEN):
        end = body.find(CLOSE)
        if end >= 0:
            return body[end + len(CLOSE) :].lstrip()
        return ""
    if not final and OPEN.startswith(body):  # blank so far, or "<thi": may still open a block
        return ""
    return text


class ThinkingFilter:
    """The visible part of a streamed answer: feed text deltas, get visible deltas."""

    def __init__(self) -> None:
        self.text, self.sent = "", 0

    def feed(self, delta: str) -> str:
        """Add a delta of the raw answer; returns the new visible text (maybe empty)."""
        self.text += delta
        return self._flush(visible_answer(self.text, final=False))

    def finish(self) -> str:
        """The visible text still held back once the answer has ended."""
        return self._flush(visible_answer(self.text, final=True))

    def _flush(self, shown: str) -> str:
        delta, self.sent = shown[self.sent :], max(self.sent, len(shown))
        return delta
