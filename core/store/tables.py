"""The store's rows as the rest of TuneDesk uses them: answers, ratings, the alias audit,
each answer's outcome and the kept knowledge warm-ups. All the SQL of the product lives here
and in the migrations.

A rating is a dict (``id``, ``answer_id``, ``rater``, ``created``, ``rating``, ``correction``,
``adapter``, ``version``, ``engine``, ``source``, ``messages``, ``answer``, ``status``,
``intent``, and any other key, e.g. a Compare verdict's ``verdict`` and ``preferred``, kept
in ``extra``). One rater has one rating per answer: a new one replaces it (same row id) and
takes a new ``seq``, so ratings read in the order they were given: a changed vote is its
answer's latest rating, whoever voted in between. What a reviewer did survives a vote that
says nothing new: a vote without a correction or intent keeps the earlier one (a reviewer's),
and so does a vote giving the very correction or intent its rater gave last (a widget
re-sending its whole body; the rater's last ones are kept in ``extra["sent"]``); the review
status stays unless the vote changes something (another rating, or a correction or intent
unlike the rater's last), which puts it back to ``new``. A thumbs-up keeps no correction: it
approves the answer as sent, and a correction belongs to a thumbs-down.
"""

from __future__ import annotations

import json
import time
import uuid

from core.store.db import Store

ANSWER_COLUMNS = ("id", "adapter", "version", "engine", "source", "created", "messages", "answer")
RATING_COLUMNS = (
    "id",
    "answer_id",
    "rater",
    "created",
    "rating",
    "correction",
    "adapter",
    "version",
    "engine",
    "source",
    "messages",
    "answer",
    "status",
    "intent",
)
REPLACED = (
    "created",
    "rating",
    "engine",
    "source",
    "messages",
    "answer",
    "extra",
)  # what a rater's new rating of the same answer overwrites
KEPT_UNLESS_GIVEN = ("correction", "intent")  # a new rating giving none keeps the earlier one
SENT = "sent"  # extra's key: the last correction and intent the rater gave themselves
# a new rating that says nothing new: the review of the earlier one stands
_NOTHING_NEW = (
    "excluded.rating = ratings.rating"
    " AND (excluded.correction IS NULL OR excluded.correction = ratings.correction)"
    " AND (excluded.intent IS NULL OR excluded.intent = ratings.intent)"
)


def put_answer(store: Store, row: dict) -> None:
    """Keep one served answer (an id seen before is left as it is)."""
    values = [
        _cell(row.get(c)) if c in ("messages", "answer") else str(row.get(c) or "")
        for c in ANSWER_COLUMNS
    ]
    extra = dict(row.get("extra") or {})
    extra.update({k: v for k, v in row.items() if k not in (*ANSWER_COLUMNS, "extra")})
    store.execute(
        f"INSERT INTO answers ({', '.join(ANSWER_COLUMNS)}, extra) VALUES "
        f"({', '.join('?' * (len(ANSWER_COLUMNS) + 1))}) ON CONFLICT (id) DO NOTHING",
        [*values, json.dumps(extra or {}, ensure_ascii=False)],
    )


def get_answer(store: Store, answer_id: str) -> dict | None:
    """A served answer by id (its ``messages`` and ``extra`` decoded), or None."""
    rows = store.query("SELECT * FROM answers WHERE id = ?", (answer_id,))
    if not rows:
        return None
    row = rows[0]
    return {**row, "messages": _json(row["messages"]), "extra": _json(row["extra"]) or {}}


def put_ratings(store: Store, *rows: dict) -> list[dict]:
    """Store ratings, all of them or none; each replaces its rater's earlier rating of the
    same answer (keeping its correction, intent and review as the module says). Returns the
    rows as stored (a replaced rating keeps its first id)."""
    stored = []
    with store.transaction():
        for row in rows:
            stored.append(_put_rating(store, row))
    return stored


def _put_rating(store: Store, row: dict) -> dict:
    row = {**row, "id": row.get("id") or f"fb-{uuid.uuid4().hex[:16]}"}
    row.setdefault("answer_id", row["id"])  # a row that names no answer is its own
    row.setdefault("status", "new")
    row.setdefault("created", "")
    if row.get("rating") == "up":  # approves the answer as sent (an old file's may carry one)
        row["correction"] = None
    if row.get("rater") is not None:
        row = _unless_sent_again(store, row)
    values = [_cell(row.get(c)) for c in RATING_COLUMNS]
    extra = json.dumps(
        {k: v for k, v in row.items() if k not in RATING_COLUMNS}, ensure_ascii=False
    )
    insert = (
        f"INSERT INTO ratings ({', '.join(RATING_COLUMNS)}, extra) "
        f"VALUES ({', '.join('?' * (len(RATING_COLUMNS) + 1))}) "
    )
    if row.get("rater") is None:  # nobody to replace: kept beside the others (NULL never clashes)
        store.execute(insert + "ON CONFLICT (id) DO NOTHING", [*values, extra])
        return dict(row)
    # excluded.seq: the next number of the table's sequence (SQLite's next rowid, PostgreSQL's
    # nextval), so the new vote sorts after every rating given before it. Every expression
    # reads the row as it was before this update (ratings.*), on both dialects.
    updates = ", ".join(
        [
            *(f"{c} = excluded.{c}" for c in (*REPLACED, "seq")),
            "correction = CASE WHEN excluded.rating = 'up' THEN NULL"
            " ELSE COALESCE(excluded.correction, ratings.correction) END",
            "intent = COALESCE(excluded.intent, ratings.intent)",
            f"status = CASE WHEN {_NOTHING_NEW} THEN ratings.status ELSE excluded.status END",
        ]
    )
    kept = store.query(
        insert + f"ON CONFLICT (answer_id, rater) DO UPDATE SET {updates} "
        "RETURNING id, status, correction, intent",
        [*values, extra],
    )
    return {**row, **kept[0]}


def _unless_sent_again(store: Store, row: dict) -> dict:
    """``row`` (a rater's vote) with what it says again taken out: a correction or intent equal
    to the last one its rater gave counts as none given, so it keeps what is kept (a reviewer's
    edit) and leaves the review standing. ``SENT`` remembers the last of each the rater gave (a
    thumbs-up drops the correction's: it keeps none)."""
    lock = " FOR UPDATE" if store.dialect == "postgres" else ""  # SQLite's BEGIN IMMEDIATE locks
    found = store.query(
        f"SELECT correction, intent, extra FROM ratings WHERE answer_id = ? AND rater = ?{lock}",
        (row["answer_id"], row["rater"]),
    )
    # a rating stored before SENT was kept: its own values are the best guess of the last given
    before = ((_json(found[0]["extra"]) or {}).get(SENT) or found[0]) if found else {}
    given = {k: row.get(k) for k in KEPT_UNLESS_GIVEN}
    row = {**row, SENT: {k: before.get(k) if given[k] is None else given[k] for k in given}}
    if row.get("rating") == "up":
        row[SENT]["correction"] = None
    for k in KEPT_UNLESS_GIVEN:
        if given[k] is not None and given[k] == before.get(k):
            row[k] = None
    return row


def rating_rows(store: Store) -> list[dict]:
    """Every rating, oldest first (a replaced rating as of its latest vote)."""
    return [rating_dict(r) for r in store.query("SELECT * FROM ratings ORDER BY seq")]


def rating_for_update(store: Store, row_id: str) -> dict | None:
    """One rating by id, locked until the transaction ends (call inside ``store.transaction()``)."""
    lock = " FOR UPDATE" if store.dialect == "postgres" else ""  # SQLite's BEGIN IMMEDIATE locks
    rows = store.query(f"SELECT * FROM ratings WHERE id = ?{lock}", (row_id,))
    return rating_dict(rows[0]) if rows else None


def update_rating(store: Store, row: dict) -> None:
    """Write back a rating's review fields: its status, correction and intent."""
    store.execute(
        "UPDATE ratings SET status = ?, correction = ?, intent = ? WHERE id = ?",
        (row.get("status"), row.get("correction"), row.get("intent"), row["id"]),
    )


def rating_dict(row: dict) -> dict:
    """A stored rating as the rest of the code reads it (its extra keys back on top)."""
    extra = _json(row.get("extra")) or {}
    found = {c: row.get(c) for c in RATING_COLUMNS}
    found["messages"] = _json(found["messages"])
    return {**found, **extra}


def put_audit(store: Store, row: dict) -> None:
    """Append one alias change to the audit (an id seen before is left as it is)."""
    store.execute(
        "INSERT INTO alias_audit (id, time, alias, body) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING",
        (
            row["id"],
            str(row.get("time", "")),
            str(row.get("alias", "")),
            json.dumps(row, ensure_ascii=False),
        ),
    )


def audit_rows(store: Store, alias: str | None = None) -> list[dict]:
    """The audit's rows (of ``alias`` when given), oldest first."""
    where, params = ("WHERE alias = ? ", (alias,)) if alias is not None else ("", ())
    return [
        json.loads(r["body"])
        for r in store.query(f"SELECT body FROM alias_audit {where}ORDER BY seq", params)
    ]


def put_outcomes(store: Store, rows: list[tuple]) -> None:
    """Append answers' outcomes: ``(version, at, outcome, first token s, full answer s)``."""
    with store.transaction():
        for row in rows:
            store.execute(
                "INSERT INTO answer_stats (version, at, outcome, first_token_s, total_s) "
                "VALUES (?, ?, ?, ?, ?)",
                row,
            )


def outcome_rows(store: Store, version: str, since: float) -> list[tuple]:
    """``(at, outcome, first token s, full answer s)`` of ``version`` at ``since`` or later."""
    rows = store.query(
        "SELECT at, outcome, first_token_s, total_s FROM answer_stats "
        "WHERE version = ? AND at >= ? ORDER BY seq",
        (version, since),
    )
    return [(r["at"], r["outcome"], r["first_token_s"], r["total_s"]) for r in rows]


def _cell(value):
    """A value as a column keeps it: lists and dicts as JSON text."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value


def _json(text):
    return json.loads(text) if isinstance(text, str) and text else None


def put_warmup(store: Store, model: str, body: dict) -> None:
    """Keep the warm-up asked for ``model`` (a model's or an alias's name), replacing any."""
    store.execute(
        "INSERT INTO knowledge_warmups (model, body, updated) VALUES (?, ?, ?) "
        "ON CONFLICT (model) DO UPDATE SET body = excluded.body, updated = excluded.updated",
        (model, json.dumps(body, ensure_ascii=False), time.strftime("%Y-%m-%dT%H:%M:%SZ")),
    )


def drop_warmup(store: Store, model: str) -> bool:
    """Forget ``model``'s kept warm-up; whether there was one."""
    return store.execute("DELETE FROM knowledge_warmups WHERE model = ?", (model,)) > 0


def warmup_rows(store: Store) -> list[dict]:
    """The kept warm-ups, ``{"model", "body", "updated"}`` by model name."""
    return [
        {**r, "body": json.loads(r["body"])}
        for r in store.query("SELECT model, body, updated FROM knowledge_warmups ORDER BY model")
    ]
