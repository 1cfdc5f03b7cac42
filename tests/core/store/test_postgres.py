"""Two app replicas on one PostgreSQL (a server this test starts itself): the API of one and the
review queue of the other write at once and lose or duplicate nothing; an answer served by one
is rated through the other and counted once."""

from __future__ import annotations

import pytest
from ratings_worker import run_both

from core.store.home import open_store
from core.store.tables import audit_rows, put_audit
from feedback.store import FeedbackStore
from serve.version_stats import VersionStats, thumbs


def test_two_replicas_share_1000_ratings_and_their_review(
    postgres_server, tmp_path, monkeypatch, capsys
):
    url = postgres_server()
    decisions, took = run_both(tmp_path / "replica-a", tmp_path / "replica-b", 1000, url)
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", url)
    store = FeedbackStore(tmp_path / "replica-c")
    assert (
        store.store.dialect == "postgres" and not (tmp_path / "replica-c" / "tunedesk.db").exists()
    )
    rows = store.ratings()
    assert len(rows) == 1000 and len({r["id"] for r in rows}) == 1000
    assert {r["answer_id"] for r in rows} == {f"api-{i}" for i in range(1000)}
    assert len(decisions) == 1000 and {r["id"]: r["status"] for r in rows} == decisions
    with capsys.disabled():
        print(f"\nPostgreSQL: 1000 ratings + 1000 reviews from 2 replicas in {took:.1f} s")


def test_an_answer_of_one_replica_is_rated_through_another_once_per_rater(
    postgres_server, tmp_path, monkeypatch
):
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", postgres_server())
    one, two = FeedbackStore(tmp_path / "a"), FeedbackStore(tmp_path / "b")
    assert one.store is not two.store  # two replicas' own connections
    one.record("chatcmpl-1", "support-v2", "ab12", "llama.cpp", [], "an answer")
    for _ in range(25):
        two.rate("chatcmpl-1", "down", rater="key-mallory")
    assert thumbs(one.ratings(), "support-v2", "ab12")["thumbs_down"] == 1
    stats_a, stats_b = VersionStats(store=one.store), VersionStats(store=two.store)
    stats_a.record("support-v2", "ok", 0.1, 0.5)
    stats_b.record("support-v2", "error")
    stats_a.flush()
    stats_b.flush()
    assert stats_a.counts("support-v2") == stats_b.counts("support-v2") == (2, 1)
    put_audit(one.store, {"id": "x1", "time": "t", "alias": "bot", "by": "ana"})
    assert [r["by"] for r in audit_rows(open_store(tmp_path / "b"), "bot")] == ["ana"]


def test_a_connection_the_server_dropped_is_made_again(postgres_server, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", postgres_server())
    store = open_store(tmp_path / "a")
    pid = store.query("SELECT pg_backend_pid() AS pid")[0]["pid"]
    other = FeedbackStore(tmp_path / "b").store
    other.execute("SELECT pg_terminate_backend(?)", (pid,))
    assert store.query("SELECT pg_backend_pid() AS pid")[0]["pid"] != pid


def test_an_answer_holding_a_nul_is_kept_and_rated_on_postgresql(
    postgres_server, tmp_path, monkeypatch
):
    """PostgreSQL's text holds no NUL (SQLite's does): a logged answer with one (a model's
    output, a pasted binary) failed to be kept, so it could not be rated. The kept copy drops
    it, as it is redacted; the conversation (JSON text) kept it escaped already."""
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", postgres_server())
    store = FeedbackStore(tmp_path / "a", log_conversations=True)
    asked = [{"role": "user", "content": "order\x0012?"}]
    store.record("chatcmpl-nul", "support-v2", "ab12", "pytorch", asked, "It ships\x00 Monday.")
    kept = store.answer("chatcmpl-nul")
    assert (kept.answer, kept.messages[0]["content"]) == ("It ships Monday.", "order12?")
    row = store.rate("chatcmpl-nul", "down", "It ships Tuesday.", rater="web")
    assert (row["answer"], row["correction"]) == ("It ships Monday.", "It ships Tuesday.")


def test_an_answer_id_holding_a_nul_is_no_answer_on_postgresql(
    postgres_server, tmp_path, monkeypatch
):
    """No answer's id holds a NUL; PostgreSQL refused to look one up (a DataError: a 500 of
    POST /v1/feedback), SQLite found nothing. Both find nothing: the API's 404."""
    monkeypatch.setenv("TUNEDESK_DATABASE_URL", postgres_server())
    store = FeedbackStore(tmp_path / "a")
    assert store.answer("chatcmpl-\x00") is None
    with pytest.raises(KeyError):
        store.rate("chatcmpl-\x00", "up", rater="web")
