"""Chat's grounding: which knowledge a Chat answer is grounded in, and the line that says so.

``auto`` (the default) grounds an adapter's answers in the knowledge version it was trained
beside (its manifest's ``knowledge``), so a first adapter is grounded with no extra click; the
base model, or an adapter without one, answers ungrounded. ``off`` never grounds; a knowledge
base's name grounds any model in its newest version.
"""

from __future__ import annotations

from feedback.store import content_text
from knowledge.grounding import ground
from knowledge.store import LATEST, KnowledgeShelf

AUTO = "auto (the adapter's own)"
OFF = "off"
CONTEXT_TOKENS = 2048  # a llama-server slot's context (core/llama_cpp/process.py), PyTorch's too


def model_room(session) -> dict:
    """``ground``'s room arguments for the session's model: its tokenizer (passages measured in
    its tokens, its control tokens refused) and its context, at most a llama-server slot's."""
    if session is None:
        return {"context_tokens": CONTEXT_TOKENS}
    from inference.generate import context_limit

    limit = context_limit(session)
    return {
        "tokenizer": session.tokenizer,
        "context_tokens": min(CONTEXT_TOKENS, limit) if limit else CONTEXT_TOKENS,
    }


def choices() -> list[str]:
    """The Chat dropdown's choices: auto, off, every knowledge base."""
    return [AUTO, OFF, *KnowledgeShelf().names()]


def source(adapters_shelf, adapter: str | None, choice: str | None) -> tuple[str, str] | None:
    """``(knowledge name, version)`` to ground in, or None for an ungrounded answer."""
    if choice == OFF:
        return None
    if choice and choice != AUTO:
        return choice, LATEST
    if not adapter:
        return None
    try:
        entry = (adapters_shelf.get(adapter).manifest or {}).get("knowledge") or {}
    except ValueError:  # a deleted or broken adapter: its own answer says so
        return None
    if not entry.get("name") or not entry.get("version"):
        return None
    return entry["name"], entry["version"]


def grounded(
    messages: list[dict],
    adapters_shelf,
    adapter: str | None,
    choice: str | None,
    system_prompt: str = "",
    answer_tokens: int = 256,
    session=None,
) -> tuple[list[dict], str, dict | None]:
    """The conversation to answer (grounded when asked), the ``answered from`` line, and the
    grounding's record to keep with the answer (its knowledge version and passage ids; None
    when it is answered ungrounded).

    ``session``: the model's session, so the passages fit its own context (None: a
    llama-server slot's 2,048 tokens, lengths estimated from characters).
    A knowledge version that is gone (deleted since the adapter was trained) is said in the
    line, and the answer is given ungrounded.
    """
    chosen = source(adapters_shelf, adapter, choice)
    if chosen is None:
        return messages, "", None
    try:
        out, grounding = ground(
            messages,
            *chosen,
            system_prompt=system_prompt,
            answer_tokens=answer_tokens,
            **model_room(session),
        )
    except ValueError as err:
        return messages, f"answered without knowledge: {err}", None
    return out, grounding.line() + _newer(chosen, choice), grounding.record()


def _newer(chosen: tuple[str, str], choice: str | None) -> str:
    """Under ``auto``, what the line adds when the adapter's knowledge base has a newer version
    (articles imported since training): ``auto`` keeps answering from the trained-beside one."""
    if choice not in (None, "", AUTO):
        return ""
    name, version = chosen
    versions = KnowledgeShelf().versions(name)
    if not versions or versions[-1].version == version:
        return ""
    return (
        f" · {name} {versions[-1].version} is newer: choose {name} under "
        '"Answer from knowledge" to answer from it'
    )


def panes(
    messages: list[dict],
    adapters_shelf,
    adapters: list[str | None],
    choice: str | None,
    system_prompt: str = "",
    answer_tokens: int = 256,
    session=None,
) -> tuple[list[list[dict]], list[str], list[dict | None]]:
    """Compare's panes grounded the way Chat grounds an answer: each pane's conversation, its
    ``answered from`` line ("" when it answers ungrounded) and its grounding's record (None:
    ungrounded), in ``adapters``' order."""
    done = [
        grounded(messages, adapters_shelf, a, choice, system_prompt, answer_tokens, session)
        for a in adapters
    ]
    return [m for m, _, _ in done], [line for _, line, _ in done], [r for _, _, r in done]


class AnswerGroundings:
    """The grounding records of Chat's recent answers, so a rating keeps what its answer was
    shown: keyed by the model, the conversation before the answer and the answer's text."""

    def __init__(self, most: int = 1000):
        self._records: dict[str, dict] = {}
        self.most = most

    @staticmethod
    def key(adapter: str | None, before: list[dict], answer: str) -> str:
        import hashlib
        import json

        turns = [[m.get("role"), content_text(m.get("content"))] for m in before]
        text = json.dumps([adapter, turns, content_text(answer)], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def remember(self, adapter, before: list[dict], answer: str, record: dict | None) -> None:
        if record is None:
            return
        self._records[self.key(adapter, before, answer)] = record
        while len(self._records) > self.most:  # the oldest go first (dicts keep order)
            self._records.pop(next(iter(self._records)))

    def get(self, adapter, before: list[dict], answer: str) -> dict | None:
        return self._records.get(self.key(adapter, before, answer))
