"""Grounded ``/v1`` answers: a request's ``knowledge`` field puts the best passages in its prompt.

``"knowledge": "auto"`` grounds an adapter's answer in the knowledge version it was trained
beside (its manifest's ``knowledge``); ``"knowledge": "NAME"`` or ``{"name": "NAME", "version":
"v2", "k": 2}`` in a chosen one. The passages go into the conversation's system message
(:func:`knowledge.grounding.ground`) before the engine sees it, and the answer names what it
was shown: the ``X-TuneDesk-Knowledge`` header and, in a whole (not streamed) answer, the
``tunedesk_grounding`` object (knowledge, version, fingerprint, passage ids).
"""

from __future__ import annotations

from knowledge.grounding import DEFAULT_K, MAX_K, ground
from knowledge.store import LATEST
from serve.requests import RequestError

KNOWLEDGE_HEADER = "X-TuneDesk-Knowledge"
AUTO = "auto"
CONTEXT_TOKENS = 2048  # a llama-server slot's context (core/llama_cpp/process.py)


def parse_knowledge(value) -> dict | None:
    """The request's ``knowledge`` field as ``{"name", "version", "k"}`` (None: not asked).

    Raises:
        RequestError: a field of the wrong type or out of range, naming it.
    """
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip():
        return {"name": value.strip(), "version": LATEST, "k": DEFAULT_K}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise RequestError("'knowledge' must be a knowledge base's name, 'auto', or "
                           '{"name": ..., "version": ..., "k": ...}', "knowledge")
    unknown = sorted(set(value) - {"name", "version", "k"})
    if unknown:
        raise RequestError(f"unknown field knowledge.{unknown[0][:40]}; known: name, version, k",
                           "knowledge")
    version, k = value.get("version", LATEST), value.get("k", DEFAULT_K)
    if not isinstance(version, str):
        raise RequestError("'knowledge.version' must be a string such as 'v2' or 'latest'",
                           "knowledge.version")
    if type(k) is not int or not 1 <= k <= MAX_K:
        raise RequestError(f"'knowledge.k' must be a whole number from 1 to {MAX_K}", "knowledge.k")
    return {"name": value["name"], "version": version, "k": k}


def apply(chat, adapter: str | None, shelf) -> dict | None:
    """Ground ``chat.messages`` as its ``knowledge`` field asks; the record of what was shown.

    Args:
        chat: the checked request (its ``messages`` are replaced by the grounded ones).
        adapter: the adapter answering (None: the base model), for ``auto``.
        shelf: the adapter shelf, for the adapter's manifest.

    Raises:
        RequestError: ``auto`` for a model trained beside no knowledge; a knowledge base or
            version that is not there (deleted since, say).
    """
    asked = parse_knowledge(chat.body.get("knowledge"))
    if asked is None:
        return None
    if asked["name"] == AUTO:
        entry = {}
        if adapter is not None:
            entry = (shelf.get(adapter).manifest or {}).get("knowledge") or {}
        if not entry.get("name"):
            raise RequestError(f"'knowledge': 'auto' needs an adapter trained beside a knowledge "
                               f"version; {adapter or 'the base model'} has none: name one",
                               "knowledge")
        asked = {**asked, "name": entry["name"], "version": entry.get("version") or LATEST}
    try:
        messages, grounding = ground(chat.messages, asked["name"], asked["version"], k=asked["k"],
                                     system_prompt=chat.settings.system_prompt,
                                     context_tokens=CONTEXT_TOKENS,
                                     answer_tokens=chat.settings.max_new_tokens)
    except ValueError as err:
        raise RequestError(f"knowledge: {err}", "knowledge") from None
    chat.messages = messages
    return grounding.record()


def header(record: dict | None) -> dict:
    """The response header naming the version and passages shown (none when not grounded)."""
    if record is None:
        return {}
    ids = ",".join(str(i) for i in record["passage_ids"]) or "none"
    return {KNOWLEDGE_HEADER: f"{record['knowledge']} {record['version']} passages={ids}"}
