"""Chat's grounding: which knowledge a Chat answer is grounded in, and the line that says so.

``auto`` (the default) grounds an adapter's answers in the knowledge version it was trained
beside (its manifest's ``knowledge``), so a first adapter is grounded with no extra click; the
base model, or an adapter without one, answers ungrounded. ``off`` never grounds; a knowledge
base's name grounds any model in its newest version.
"""

from __future__ import annotations

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
) -> tuple[list[dict], str]:
    """The conversation to answer (grounded when asked) and the ``answered from`` line.

    ``session``: the model's session, so the passages fit its own context (None: a
    llama-server slot's 2,048 tokens, lengths estimated from characters).
    A knowledge version that is gone (deleted since the adapter was trained) is said in the
    line, and the answer is given ungrounded.
    """
    chosen = source(adapters_shelf, adapter, choice)
    if chosen is None:
        return messages, ""
    try:
        out, grounding = ground(
            messages,
            *chosen,
            system_prompt=system_prompt,
            answer_tokens=answer_tokens,
            **model_room(session),
        )
    except ValueError as err:
        return messages, f"answered without knowledge: {err}"
    return out, grounding.line()


def panes(
    messages: list[dict],
    adapters_shelf,
    adapters: list[str | None],
    choice: str | None,
    system_prompt: str = "",
    answer_tokens: int = 256,
    session=None,
) -> tuple[list[list[dict]], list[str]]:
    """Compare's panes grounded the way Chat grounds an answer: each pane's conversation and its
    ``answered from`` line ("" when it answers ungrounded), in ``adapters``' order."""
    done = [
        grounded(messages, adapters_shelf, a, choice, system_prompt, answer_tokens, session)
        for a in adapters
    ]
    return [m for m, _ in done], [line for _, line in done]
