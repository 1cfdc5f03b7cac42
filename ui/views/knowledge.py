"""What the Knowledge tab shows and does, in plain Python: import files, browse a version's
passages, try a search (each a call of :mod:`knowledge.actions`)."""

from __future__ import annotations

from pathlib import Path

from core.user_text import cut, quote
from knowledge import actions
from knowledge.store import LATEST, KnowledgeShelf
from ui.views.uploads import by_upload_name
from ui.views.wording import as_markdown, for_ui

KINDS = ("auto", "article", "macro", "past_answer")
PASSAGE_COLUMNS = ["id", "kind", "title", "question", "text", "source"]
HIT_COLUMNS = ["rank", "id", "score", "intent", "title", "text", "source"]
SHOWN = 200  # passages listed at once: a version of 20,000 past answers is browsed by search
TEXT_CHARS = 300


def names() -> list[str]:
    """Every knowledge base on the shelf."""
    return KnowledgeShelf().names()


def versions(name: str | None) -> list[str]:
    """``name``'s versions, newest first (none for no name)."""
    return [v.version for v in reversed(KnowledgeShelf().versions(name))] if name else []


def import_upload(files, name: str, kind: str = "auto", replace: bool = False) -> str:
    """Import uploaded files (paths, or Gradio's file objects) as ``name``'s next version.

    Raises:
        ValueError: no file, a bad file, a bad name (nothing imported); a file is named as
            the user named it, never by the upload's temporary path.
    """
    uploads = [Path(str(getattr(f, "name", f))) for f in (files or []) if f]
    gone = [u.name for u in uploads if not u.exists()]
    if gone:  # the temporary copy was cleared (a restart, a cleaned /tmp) under an open page
        raise ValueError(
            f"{', '.join(map(cut, gone))}: the upload is no longer on the server (cleared, or "
            "the app restarted since it was uploaded); remove it and upload it again"
        )
    chosen = None if kind in ("auto", "", None) else kind
    try:
        return actions.import_files(
            [str(u) for u in uploads], (name or "").strip(), kind=chosen, replace=bool(replace)
        )
    except ValueError as err:
        raise ValueError(for_ui(by_upload_name(str(err), uploads))) from None


def about(name: str | None, version: str | None) -> str:
    """One version in a line: passages by kind, sources, fingerprint, created."""
    if not name:
        return (
            "The knowledge shelf is empty: import a file, or train an adapter "
            "(its training answers go here)."
        )
    v = KnowledgeShelf().get(name, version or LATEST)
    kinds = ", ".join(f"{n:,} {k.replace('_', ' ')}s" for k, n in sorted(v.kinds.items()))
    trained = " (a training split's answers)" if v.extra.get("split") == "train" else ""
    return (
        f"**{v.name} {v.version}**{trained}: {v.passages:,} passages ({kinds}) from "
        f"{', '.join(v.sources) or '-'}; fingerprint `{v.fingerprint}`, created {v.created}."
    )


def passage_table(name: str | None, version: str | None) -> list[list]:
    """The first :data:`SHOWN` passages of a version as table rows."""
    if not name:
        return []
    rows = actions.passage_rows(name, version or LATEST, limit=SHOWN)
    return [
        [r["id"], r["kind"], r["title"], r["question"], _cut(r["text"]), r["source"]] for r in rows
    ]


def search_table(query: str, name: str | None, version: str | None, k: int = 3) -> list[list]:
    """The best passages for ``query`` as table rows, best first: the ones a grounded answer
    would be shown (searched within the asked intent's past answers where it is clear).

    Raises:
        ValueError: no knowledge base chosen, an empty query, a bad ``k``.
    """
    return search_results(query, name, version, k)[0]


def search_results(
    query: str, name: str | None, version: str | None, k: int = 3
) -> tuple[list[list], str]:
    """:func:`search_table`'s rows and the line shown above them: "" when something matched,
    else that nothing did and what to try (an empty table alone said nothing).

    Raises:
        ValueError: no knowledge base chosen, an empty query, a bad ``k``.
    """
    if not name:
        raise ValueError("choose a knowledge base first (or import a file)")
    found = actions.search(query, name, version or LATEST, int(k))
    rows = [
        [
            rank,
            h["id"],
            round(h["score"], 3),
            h.get("intent", ""),
            h["title"],
            _cut(h["text"]),
            h["source"],
        ]
        for rank, h in enumerate(found["passages"], start=1)
    ]
    if rows:
        return rows, ""
    return rows, (
        f"Nothing in **{found['knowledge']} {found['version']}** matched "
        f"{quote(query.strip())}: the search matches words (and their endings), not meanings. "
        "Try the words a customer would write, fewer words, or another version."
    )


def search_again(
    query: str, name: str | None, version: str | None, k: int = 3
) -> tuple[list[list], str]:
    """The hits for the knowledge base and version now picked, so that none shown belongs to
    another: the query searched again there, none when the box is empty. A refusal is the line
    above the hits, not a warning: the user pressed no Search."""
    if not (query or "").strip():
        return [], ""
    try:
        return search_results(query, name, version, k)
    except ValueError as err:
        return [], f"⚠️ {as_markdown(str(err))}"


def delete_version(name: str | None, version: str | None, confirmed: bool) -> str:
    """Delete one version (the chosen one) for good, when confirmed.

    Raises:
        ValueError: nothing chosen, not confirmed.
    """
    if not name or not version:
        raise ValueError("choose a knowledge base and a version to delete")
    try:
        return actions.delete(name, version, confirmed=bool(confirmed))
    except ValueError as err:
        raise ValueError(for_ui(str(err))) from None


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "…"
