"""The store's connection: migrations applied once, in order; the API and the review queue
writing at once from two processes lose and duplicate nothing."""

from __future__ import annotations

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


def test_1000_ratings_from_the_api_and_the_review_queue_at_once_all_kept_once(home, capsys):
    decisions, took = run_both(home, home, 1000)
    rows = FeedbackStore().ratings()
    assert len(rows) == 1000 and len({r["id"] for r in rows}) == 1000
    assert {r["answer_id"] for r in rows} == {f"api-{i}" for i in range(1000)}
    # every decision of the reviewer is there, and none was undone by a rating written after it
    assert len(decisions) == 1000 and {r["id"]: r["status"] for r in rows} == decisions
    with capsys.disabled():
        print(f"\nSQLite: 1000 ratings + 1000 reviews from 2 processes in {took:.1f} s")
