"""The store's connection: migrations applied once, in order; the API and the review queue
writing at once from two processes lose and duplicate nothing."""

from __future__ import annotations

import pytest
from ratings_worker import run_both

from core.store.db import Store, migrations, statements
from feedback.store import FeedbackStore


def test_the_migrations_run_once_in_order_on_both_dialects(tmp_path):
    assert [n for n, _ in migrations()][:1] == [1]
    store = Store(tmp_path / "t.db")
    assert store.migrate() == [n for n, _ in migrations()]
    assert store.migrate() == []  # a second start applies nothing
    tables = {r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "answers",
        "ratings",
        "alias_audit",
        "answer_stats",
        "imports",
        "schema_migrations",
    } <= tables
    assert store.query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
    script = migrations()[0][1].read_text()
    assert any("BIGSERIAL PRIMARY KEY" in s for s in statements(script, "postgres"))
    assert not any("{serial}" in s or "--" in s for s in statements(script, "sqlite"))


def test_many_connections_opening_a_new_store_at_once_all_get_it_in_wal_mode(tmp_path):
    # Eight connections switching one new file to WAL together: SQLite answers some of them
    # "database is locked" at once, without waiting out its busy timeout (about one round in
    # twelve here; the API and the review queue starting together once failed so). Each is
    # asked again until the switch is done.
    import threading

    for round_ in range(40):
        stores = [Store(tmp_path / f"new-{round_}.db") for _ in range(8)]
        start, errors = threading.Barrier(len(stores)), []

        threads = [threading.Thread(target=_open_at_once, args=(s, start, errors)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == ["wal"] * len(stores), (round_, errors)
        for store in stores:
            store.close()


def _open_at_once(store: Store, start, modes: list) -> None:
    """``store``'s first query once every thread is ready: its journal mode, or its error."""
    start.wait()
    try:
        modes.extend(r["journal_mode"] for r in store.query("PRAGMA journal_mode"))
    except Exception as err:  # the failure the test above is about, reported there
        modes.append(f"{type(err).__name__}: {err}")


def test_1000_ratings_from_the_api_and_the_review_queue_at_once_all_kept_once(home, capsys):
    decisions, took = run_both(home, home, 1000)
    rows = FeedbackStore().ratings()
    assert len(rows) == 1000 and len({r["id"] for r in rows}) == 1000
    assert {r["answer_id"] for r in rows} == {f"api-{i}" for i in range(1000)}
    # every decision of the reviewer is there, and none was undone by a rating written after it
    assert len(decisions) == 1000 and {r["id"]: r["status"] for r in rows} == decisions
    with capsys.disabled():
        print(f"\nSQLite: 1000 ratings + 1000 reviews from 2 processes in {took:.1f} s")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_thumbs_up_stored_with_a_stale_correction_loses_it_when_the_store_opens(
    dialect, tmp_path, request, monkeypatch
):
    """A vote changed from down to up before b66399f kept the down vote's correction; the review
    queue showed it beside the answer the user approved (export already ignored it). Opening
    the store clears it, on either dialect; a thumbs-down keeps its own, and a thumbs-up in an
    old ratings.jsonl imported after the migrations comes in without one."""
    import json

    import core.store.db as db
    from feedback.review import queue

    url = request.getfixturevalue("postgres_server")() if dialect == "postgres" else ""
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", url)
    home = tmp_path / "home"
    (home / "feedback").mkdir(parents=True)
    everything = db.migrations()
    with monkeypatch.context() as before:  # the store as the release before this one left it
        before.setattr(db, "migrations", lambda: [m for m in everything if m[0] <= 2])
        old = Store(url or home / "tunedesk.db")
        old.migrate()
    columns = "(id, answer_id, rater, created, rating, correction, status)"
    for row in [
        (
            "fb-up",
            "chatcmpl-1",
            "key-app",
            "2026-11-30T10:00:00",
            "up",
            "Refunds take 3 days.",
            "new",
        ),
        (
            "fb-down",
            "chatcmpl-2",
            "key-app",
            "2026-11-30T10:01:00",
            "down",
            "It ships Monday.",
            "new",
        ),
    ]:
        old.execute(f"INSERT INTO ratings {columns} VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    old.close()
    legacy = {"id": "fb-old", "answer_id": "chatcmpl-3", "rating": "up", "correction": "stale"}
    (home / "feedback" / "ratings.jsonl").write_text(json.dumps(legacy) + "\n")

    store = FeedbackStore(home)
    assert store.store.dialect == dialect
    shown = {r["id"]: r["correction"] for r in queue(store)}
    assert shown == {"fb-up": None, "fb-down": "It ships Monday.", "fb-old": None}
    assert store.store.migrate() == []  # once
