"""Grounded ``/v1`` answers: the best passages of the team's knowledge in the prompt.

An adapter asked by name answers grounded in the knowledge version it was trained beside (its
manifest's ``knowledge``), as Chat does, unless the request's ``knowledge`` field says
otherwise: ``"off"`` (or ``false``) answers ungrounded; ``"auto"`` asks for the adapter's own
and is a 400 when it has none; ``"NAME"`` or ``{"name": "NAME", "version": "v2", "k": 2}``
grounds in a chosen one. The base model, an adapter trained beside no knowledge, and a
request with ``tools`` answer ungrounded unless asked; so does an adapter whose knowledge
version is gone since (asked for by name, that is a 400).

The passages go into the conversation's system message (:func:`knowledge.grounding.ground`)
before the engine sees it, and the answer names what it was shown: the
``X-TuneDesk-Knowledge`` header and, in a whole (not streamed) answer, the
``tunedesk_grounding`` object (knowledge, version, fingerprint, passage ids).

A request to an alias is grounded as the alias says (``off``, ``auto`` or ``NAME[@vN]``:
:mod:`adapters.shelf.aliases`), so what the gate passed is what serves: a ``knowledge`` field
that asks for something else is a 400 naming ``knowledge`` (one that says the same, or only
changes ``k``, is taken). A knowledge version the alias names that is gone is a 400 naming the
alias and how to set it again; nothing of the alias is changed.
"""

from __future__ import annotations

from adapters.shelf.alias_rules import GROUNDING_AUTO, GROUNDING_OFF, split_grounding
from core.user_text import check_unicode, replace_invalid
from knowledge.grounding import DEFAULT_K, MAX_K, ground
from knowledge.store import LATEST
from serve.requests import RequestError

KNOWLEDGE_HEADER = "X-TuneDesk-Knowledge"
AUTO = "auto"
OFF = "off"  # the request's knowledge field: answer ungrounded
IMPLICIT = "implicit"  # the key marking a grounding the request did not ask for
CONTEXT_TOKENS = 2048  # a llama-server slot's context (core/llama_cpp/process.py)


def parse_knowledge(value) -> dict | str | None:
    """The request's ``knowledge`` field as ``{"name", "version", "k"}``, :data:`OFF`, or None
    (not given).

    Raises:
        RequestError: a field of the wrong type or out of range, naming it.
    """
    if value is None:
        return None
    if isinstance(value, str):
        _valid_text(value, "knowledge")
    if value is False or (isinstance(value, str) and value.strip().lower() == OFF):
        return OFF
    if isinstance(value, str) and value.strip():
        return {"name": value.strip(), "version": LATEST, "k": DEFAULT_K}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise RequestError(
            "'knowledge' must be a knowledge base's name, 'auto', or "
            '{"name": ..., "version": ..., "k": ...}',
            "knowledge",
        )
    unknown = sorted(set(value) - {"name", "version", "k"})
    if unknown:
        name = replace_invalid(unknown[0])[:40]  # named in the answer, which must encode
        raise RequestError(f"unknown field knowledge.{name}; known: name, version, k", "knowledge")
    _valid_text(value["name"], "knowledge")
    version, k = value.get("version", LATEST), value.get("k", DEFAULT_K)
    if not isinstance(version, str):
        raise RequestError(
            "'knowledge.version' must be a string such as 'v2' or 'latest'", "knowledge.version"
        )
    _valid_text(version, "knowledge.version")
    if type(k) is not int or not 1 <= k <= MAX_K:
        raise RequestError(f"'knowledge.k' must be a whole number from 1 to {MAX_K}", "knowledge.k")
    return {"name": value["name"], "version": version, "k": k}


def _valid_text(text: str, param: str) -> None:
    """Refuse a name holding a lone surrogate as a bad request naming ``param``: no knowledge
    base or version is named so, and looking one up answered 404 naming it."""
    try:
        check_unicode(text, param)
    except ValueError as err:
        raise RequestError(str(err), param) from None


def apply(
    chat,
    adapter: str | None,
    shelf,
    alias: str | None = None,
    alias_grounding: str | None = None,
    context_tokens: int = CONTEXT_TOKENS,
    tokenizer=None,
) -> dict | None:
    """Ground ``chat.messages`` as its alias, else its ``knowledge`` field, asks; the record of
    what was shown.

    Args:
        chat: the checked request (its ``messages`` are replaced by the grounded ones).
        adapter: the adapter answering (None: the base model), for ``auto``.
        shelf: the adapter shelf, for the adapter's manifest.
        alias: the alias the request named (None: a model asked by name).
        alias_grounding: that alias's grounding (``off``, ``auto``, ``NAME[@vN]``).
        context_tokens: what the answering model reads at most; the passages get what the
            conversation and the answer leave of it.
        tokenizer: the model's tokenizer (its control tokens refused in passages, the room
            counted in its tokens).

    Raises:
        RequestError: ``auto`` for a model trained beside no knowledge; a knowledge base or
            version that is not there (deleted since, say); a ``knowledge`` field that asks an
            alias for other grounding than its own.
    """
    asked = asked_grounding(chat.body.get("knowledge"), adapter, shelf, alias, alias_grounding)
    if asked is None or (asked.get(IMPLICIT) and chat.tools):
        return None
    if asked.get(IMPLICIT):
        try:
            return _ground(chat, asked, None, "knowledge", context_tokens, tokenizer)
        except RequestError:  # its knowledge deleted since training: answered as it is
            return None
    gone = None
    if alias is not None:
        gone = (
            f"alias {alias!r} grounds in {asked['name']} {asked['version']}, which is not on the "
            f"knowledge shelf any more; set its grounding again (python -m adapters alias set "
            f"{alias} --grounding ...)"
        )
    return _ground(chat, asked, gone, "model" if alias else "knowledge", context_tokens, tokenizer)


def asked_grounding(
    value, adapter: str | None, shelf, alias: str | None = None, alias_grounding: str | None = None
) -> dict | None:
    """``{"name", "version", "k"}`` an answer of ``adapter`` is grounded in, as its alias (when
    asked through one) and the request's ``knowledge`` field ``value`` say; None: ungrounded.

    Raises:
        RequestError: as :func:`apply`.
    """
    asked = parse_knowledge(value)
    if alias is not None:
        return _alias_asks(alias, alias_grounding or GROUNDING_AUTO, adapter, shelf, asked)
    if asked == OFF:
        return None
    if asked is None:  # not asked: the adapter's own knowledge, as Chat grounds it
        entry = _trained_beside(adapter, shelf)
        if not entry.get("name"):
            return None
        return {
            "name": entry["name"],
            "version": entry.get("version") or LATEST,
            "k": DEFAULT_K,
            IMPLICIT: True,
        }
    if asked["name"] == AUTO:
        entry = _trained_beside(adapter, shelf)
        if not entry.get("name"):
            raise RequestError(
                f"'knowledge': 'auto' needs an adapter trained beside a knowledge "
                f"version; {adapter or 'the base model'} has none: name one",
                "knowledge",
            )
        asked = {**asked, "name": entry["name"], "version": entry.get("version") or LATEST}
    return asked


def _trained_beside(adapter: str | None, shelf) -> dict:
    """The manifest's ``knowledge`` of ``adapter`` ({} for the base model or none)."""
    if adapter is None:
        return {}
    return (shelf.get(adapter).manifest or {}).get("knowledge") or {}


def _ground(
    chat,
    asked: dict,
    gone: str | None,
    param: str,
    context_tokens: int = CONTEXT_TOKENS,
    tokenizer=None,
) -> dict:
    """``chat.messages`` grounded in ``asked``; ``gone``: the sentence when it is not there."""
    try:
        messages, grounding = ground(
            chat.messages,
            asked["name"],
            asked["version"],
            k=asked["k"],
            system_prompt=chat.settings.system_prompt,
            context_tokens=context_tokens,
            tokenizer=tokenizer,
            answer_tokens=chat.settings.max_new_tokens,
        )
    except ValueError as err:
        raise RequestError(f"{gone} ({err})" if gone else f"knowledge: {err}", param) from None
    chat.messages = messages
    return grounding.record()


def _alias_asks(
    alias: str, setting: str, adapter: str | None, shelf, asked: dict | str | None
) -> dict | None:
    """What a request to ``alias`` is grounded in (None: ungrounded), its own field checked.

    ``auto`` takes the answering version's manifest knowledge; a version trained beside none
    answers ungrounded (as it was evaluated).
    """
    if setting == GROUNDING_OFF:
        own = None
    elif setting == GROUNDING_AUTO:
        entry = _trained_beside(adapter, shelf)
        own = (
            {"name": entry["name"], "version": entry.get("version") or LATEST, "k": DEFAULT_K}
            if entry.get("name")
            else None
        )
    else:
        name, version = split_grounding(setting)
        own = {"name": name, "version": version, "k": DEFAULT_K}
    if asked is None or (asked == OFF and own is None):
        return own
    if asked != OFF:
        if asked["name"] == AUTO and setting == GROUNDING_AUTO:
            return own and {**own, "k": asked["k"]}
        if own is not None and (asked["name"], asked["version"]) == (own["name"], own["version"]):
            return {**own, "k": asked["k"]}
    said = "off" if own is None else f"{own['name']} {own['version']}"
    raise RequestError(
        f"model {alias!r} is an alias grounded as it says ({setting}: {said}); its "
        "answers are grounded as the release gate passed them, so leave out "
        "'knowledge' (or ask an adapter by name)",
        "knowledge",
    )


def header(record: dict | None) -> dict:
    """The response header naming the version and passages shown (none when not grounded)."""
    if record is None:
        return {}
    ids = ",".join(str(i) for i in record["passage_ids"]) or "none"
    return {KNOWLEDGE_HEADER: f"{record['knowledge']} {record['version']} passages={ids}"}
