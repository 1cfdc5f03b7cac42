"""One version's index: its passages in SQLite with an FTS5 table, searched by BM25.

The passages live in the same file as their index (``index.sqlite``), so a version is one
file to copy or delete. FTS5's ``bm25()`` ranks; the question column weighs most, since a
customer's question is best matched by the question a past answer answered.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from knowledge.passages import Passage

# bm25() weights per column (title, question, text): see `python -m bench knowledge-retrieval`
WEIGHTS = (2.0, 4.0, 1.0)
MAX_QUERY_WORDS = 64  # a pasted e-mail is cut to its first words: each adds a term to rank
_WORD = re.compile(r"\w+", re.UNICODE)
# Words that say little about what is asked; dropped from a query that has others, since in a
# small knowledge base BM25 still weighs them (a FAQ's "how do I ..." matches every "do I").
STOPWORDS = frozenset(
    (  # "when", "where", "how" stay: they tell delivery from tracking
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "have",
        "hi",
        "hello",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "so",
        "that",
        "the",
        "this",
        "to",
        "u",
        "was",
        "we",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yo",
        "hey",
        "thanks",
        "thank",
        "im",
        "ur",
        "pls",
    )
)

_SCHEMA = """
CREATE TABLE passages (id INTEGER PRIMARY KEY, kind TEXT, title TEXT, question TEXT,
                       text TEXT, source TEXT, intent TEXT);
CREATE INDEX passages_by_intent ON passages(intent, kind);
CREATE VIRTUAL TABLE fts USING fts5(title, question, text, content='passages',
                                    content_rowid='id', tokenize='porter unicode61');
"""


@dataclass(frozen=True)
class Hit:
    """A passage found by a search: its id in the version, its BM25 score (higher: better)."""

    id: int
    score: float
    passage: Passage

    def to_dict(self) -> dict:
        return {"id": self.id, "score": round(self.score, 4), **self.passage.to_dict()}


def fts5_available() -> bool:
    """Whether this Python's SQLite was built with FTS5."""
    with closing(sqlite3.connect(":memory:")) as db:
        try:
            db.execute("CREATE VIRTUAL TABLE t USING fts5(a)")
        except sqlite3.OperationalError:
            return False
    return True


def build(path: Path, passages: list[Passage]) -> None:
    """Write ``passages`` (ids 1..n in order) and their FTS5 index into a new file at ``path``.

    Raises:
        RuntimeError: this Python's SQLite has no FTS5.
    """
    if not fts5_available():
        raise RuntimeError(
            f"this Python's SQLite ({sqlite3.sqlite_version}) has no FTS5; "
            "the knowledge shelf needs a Python built with it"
        )
    with closing(sqlite3.connect(path)) as db, db:
        db.executescript(_SCHEMA)
        db.executemany(
            "INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (i, p.kind, p.title, p.question, p.text, p.source, p.intent)
                for i, p in enumerate(passages, start=1)
            ],
        )
        db.execute("INSERT INTO fts(fts) VALUES ('rebuild')")
        db.execute("INSERT INTO fts(fts) VALUES ('optimize')")


def words(text: str) -> list[str]:
    """The words of ``text``, lowercased, each once, in order."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(text or "")))


def content_words(text: str) -> list[str]:
    """The words of ``text`` a search ranks by: :func:`words` without the stopwords."""
    return [w for w in words(text) if w not in STOPWORDS]


def match_expression(query: str) -> str | None:
    """The FTS5 query for text a customer typed: its words, quoted, any of them (None: no word).

    Quoting keeps FTS5's own syntax (``AND``, ``NEAR``, ``*``, ``"``) from ever being read in it.
    """
    said = words(query)
    said = ([w for w in said if w not in STOPWORDS] or said)[:MAX_QUERY_WORDS]
    return " OR ".join(f'"{w}"' for w in said) or None


def search(
    path: Path, query: str, k: int = 3, weights: tuple = WEIGHTS, intent: str | None = None
) -> list[Hit]:
    """The ``k`` passages of the index at ``path`` that best match ``query``, best first.

    ``intent``: only passages labelled with it, or with no intent at all (articles, macros,
    unlabelled past answers), are searched; None searches them all.
    """
    expression = match_expression(query)
    if expression is None or k <= 0:
        return []
    with closing(_open(path)) as db:
        only = ""
        params: tuple = (*weights, expression)
        if intent is not None and "intent" in _names(db):
            only = " AND (p.intent = ? OR p.intent IS NULL OR p.intent = '')"
            params = (*params, intent)
        sql = (
            f"SELECT p.id, -bm25(fts, ?, ?, ?) AS score, {_columns(db, 'p.')} "
            f"FROM fts JOIN passages p ON p.id = fts.rowid WHERE fts MATCH ?{only} "
            "ORDER BY bm25(fts, ?, ?, ?) LIMIT ?"
        )
        rows = db.execute(sql, (*params, *weights, int(k))).fetchall()
    return [Hit(r[0], r[1], _passage(r[2:])) for r in rows]


def passages(path: Path, offset: int = 0, limit: int | None = None) -> list[tuple[int, Passage]]:
    """``(id, passage)`` of the index at ``path`` in id order, ``limit`` of them from ``offset``."""
    with closing(_open(path)) as db:
        rows = db.execute(
            f"SELECT id, {_columns(db)} FROM passages ORDER BY id LIMIT ? OFFSET ?",
            (-1 if limit is None else int(limit), int(offset)),
        ).fetchall()
    return [(r[0], _passage(r[1:])) for r in rows]


def by_ids(path: Path, ids: list[int]) -> dict[int, Passage]:
    """The passages with these ids (a missing id is left out)."""
    wanted = [int(i) for i in ids]
    if not wanted:
        return {}
    with closing(_open(path)) as db:
        rows = db.execute(
            f"SELECT id, {_columns(db)} FROM passages WHERE id IN ({','.join('?' * len(wanted))})",
            wanted,
        ).fetchall()
    return {r[0]: _passage(r[1:]) for r in rows}


def articles_of(path: Path, intent: str) -> list[tuple[int, Passage]]:
    """``(id, passage)`` of the articles and macros labelled ``intent`` (not past answers), in
    id order; none from an index that keeps no intents."""
    with closing(_open(path)) as db:
        if "intent" not in _names(db):
            return []
        rows = db.execute(
            f"SELECT id, {_columns(db)} FROM passages WHERE intent = ? AND kind != 'past_answer' "
            "ORDER BY id",
            (intent,),
        ).fetchall()
    return [(r[0], _passage(r[1:])) for r in rows]


def has_intents(path: Path) -> bool:
    """Whether the index at ``path`` keeps its passages' intents (versions made before
    passages had intents do not)."""
    with closing(_open(path)) as db:
        return "intent" in _names(db)


def _names(db: sqlite3.Connection) -> set[str]:
    return {r[1] for r in db.execute("PRAGMA table_info(passages)")}


def _columns(db: sqlite3.Connection, prefix: str = "") -> str:
    """The passage columns to select; an index from before intents gives ``''`` for one."""
    intent = f"{prefix}intent" if "intent" in _names(db) else "''"
    return ", ".join(f"{prefix}{c}" for c in ("kind", "title", "question", "text", "source")) + (
        f", {intent}"
    )


def _passage(row) -> Passage:
    """A passage from ``(kind, title, question, text, source, intent)``."""
    kind, title, question, text, source, intent = row
    return Passage(title, text, source, kind, question, intent or "")


def _open(path: Path) -> sqlite3.Connection:
    # Read-only: a version is immutable, and a search must never create a missing file.
    return sqlite3.connect(
        f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
    )
