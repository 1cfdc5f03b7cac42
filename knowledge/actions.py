"""What the CLI, the Knowledge tab and the ``/v1`` route do, in one place, with their sentences.

Each function takes plain values, returns a sentence or plain rows, and raises ``ValueError``
with a sentence for bad input; nothing is changed when it raises.
"""

from __future__ import annotations

from pathlib import Path

from core.user_text import check_unicode, cut, quote
from knowledge.importers import read_file
from knowledge.passages import spells_control
from knowledge.routing import routed_search
from knowledge.store import LATEST, KnowledgeShelf

DEFAULT_NAME = "articles"
MAX_K = 20  # passages one search returns at most: a prompt holds a few
DELETE_UNCONFIRMED = "Deleting is for good: confirm it (--yes, or tick the box)."


class SearchError(ValueError):
    """A search asked wrongly; ``param`` names the input, as ``/v1/knowledge/search`` calls it
    (``q`` or ``k``)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def import_files(
    files: list,
    name: str = DEFAULT_NAME,
    *,
    kind: str | None = None,
    replace: bool = False,
    shelf: KnowledgeShelf | None = None,
) -> str:
    """Read every file, then make one new version of ``name`` from them.

    Every file is read before anything is written: one bad file refuses the whole import,
    and the shelf is as it was. The sentence ends with each file's rows or sections that
    gave no passage, counted by reason with their lines ("faq.csv: 2 rows skipped: empty
    answer (lines 4, 9).").

    Raises:
        ValueError: no file, a file that cannot become passages (the sentence names it).
    """
    shelf = shelf or KnowledgeShelf()
    files = [Path(str(f)) for f in (files or []) if f]
    if not files:
        raise ValueError("choose at least one file to import")
    reads = [read_file(f, kind) for f in files]
    passages = [p for r in reads for p in r.passages]
    skipped = "".join(f" {r.note}" for r in reads if r.note)
    version, created = shelf.add(name, passages, [f.name for f in files], replace=replace)
    if not created:
        return (
            f"{name} {version.version} already holds exactly this content "
            f"({version.passages:,} passages); no new version made."
        ) + skipped
    return (
        (
            f"Imported {len(passages):,} passage(s) from {len(files)} file(s) "
            f"into {name} {version.version} "
            f"({version.passages:,} passages in all, fingerprint {version.fingerprint})."
        )
        + skipped
        + label_note(version)
    )


def label_note(version) -> str:
    """A sentence (with a leading space) on articles labelled with an intent no past answer of
    ``version`` has: routing never names it, so they are shown as unlabelled articles are; "" when
    every label matches."""
    every = [p for _, p in version.passages_page()]
    known = {p.intent for p in every if p.kind == "past_answer" and p.intent}
    stray = {}
    for p in every:
        if p.kind != "past_answer" and p.intent and p.intent not in known:
            stray.setdefault(p.intent, p.title)
    if not stray:
        return ""
    named = _first_few([f"{i} ({quote(title, 40)})" for i, title in sorted(stray.items())])
    if not known:
        return (
            f" Articles labelled with an intent take effect beside past answers of that intent, "
            f"and {version.name} {version.version} has none: import the past answers into the "
            f"same knowledge base ({len(stray)} labelled: {named})."
        )
    return (
        f" {len(stray)} label(s) match no past answer's intent here, so those articles are shown "
        f"as unlabelled ones are: {named}. Check the spelling against the data's intents, or "
        "import past answers of those intents."
    )


def _first_few(items: list[str], shown: int = 5) -> str:
    """``a, b, c`` or, past ``shown`` items, ``a, b, c, d, e and 22 more`` (a help center
    labels every article: a sentence naming 27 of them is not read)."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def search(
    query: str,
    name: str = DEFAULT_NAME,
    version: str = LATEST,
    k: int = 3,
    shelf: KnowledgeShelf | None = None,
) -> dict:
    """The ``k`` best passages for ``query``, with the version they come from: the search a
    grounded answer makes (routed to the asked intent's past answers where the version can
    tell it, :mod:`knowledge.routing`).

    Returns:
        ``{"knowledge", "version", "fingerprint", "query", "intent", "passages": [{id, score,
        title, text, source, kind, question, spells_control}]}`` (``intent``: the asked intent
        searched within, ``""`` when every passage was searched).

    Raises:
        SearchError: an empty query or one that is not valid Unicode, ``k`` out of 1..MAX_K.
        ValueError: an unknown name or version.
    """
    try:
        check_unicode(query or "", "the query")
    except ValueError as err:
        raise SearchError(str(err), "q") from None
    if not (query or "").strip():
        raise SearchError("the query is empty: type what a customer asks", "q")
    if not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise SearchError(f"k must be a whole number from 1 to {MAX_K}, not {cut(str(k))}", "k")
    chosen = (shelf or KnowledgeShelf()).get(name, version or LATEST)
    found = routed_search(chosen, query, k)
    return {
        "object": "knowledge.search",
        "knowledge": chosen.name,
        "version": chosen.version,
        "fingerprint": chosen.fingerprint,
        "query": query,
        "intent": found.intent,
        "passages": [
            {**h.to_dict(), "spells_control": spells_control(h.passage)} for h in found.hits
        ],
    }


def version_rows(name: str | None = None, shelf: KnowledgeShelf | None = None) -> list[dict]:
    """One row per version: of ``name``, or the newest of every knowledge base."""
    shelf = shelf or KnowledgeShelf()
    if name:
        versions = shelf.versions(name)
        if not versions:
            shelf.get(name)  # the sentence naming what there is
    else:
        versions = [shelf.get(n) for n in shelf.names()]
    return [v.to_dict() for v in versions]


def passage_rows(
    name: str,
    version: str = LATEST,
    offset: int = 0,
    limit: int | None = 20,
    shelf: KnowledgeShelf | None = None,
) -> list[dict]:
    """One row per passage of a version, in id order."""
    chosen = (shelf or KnowledgeShelf()).get(name, version or LATEST)
    return [{"id": i, **p.to_dict()} for i, p in chosen.passages_page(offset, limit)]


def delete(
    name: str,
    version: str | None = None,
    *,
    confirmed: bool = False,
    shelf: KnowledgeShelf | None = None,
) -> str:
    """Delete one version of ``name``, or all of it.

    Raises:
        ValueError: not confirmed (nothing deleted), an unknown name or version.
    """
    shelf = shelf or KnowledgeShelf()
    target = shelf.get(name, version) if version else shelf.get(name)  # unknown: said first
    if not confirmed:
        what = f"{name} {target.version}" if version else f"{name} (every version)"
        raise ValueError(f"{what}: {DELETE_UNCONFIRMED}")
    gone = shelf.delete(name, version)
    return f"Deleted {name} {', '.join(gone)}."
