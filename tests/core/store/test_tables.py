"""The ratings table on both dialects (SQLite, and a PostgreSQL this test starts itself): a
rater's new vote of an answer is that answer's latest rating."""

from __future__ import annotations

import pytest

from feedback.store import FeedbackStore
from serve.version_stats import thumbs


@pytest.fixture(params=["sqlite", "postgres"])
def feedback(request, tmp_path, monkeypatch):
    """A FeedbackStore on a fresh store of each dialect, answer ``chatcmpl-1`` served."""
    if request.param == "postgres":
        monkeypatch.setenv("TUNEDESK_DATABASE_URL", request.getfixturevalue("postgres_server")())
    else:
        monkeypatch.delenv("TUNEDESK_DATABASE_URL", raising=False)
    store = FeedbackStore(tmp_path / "home")
    assert store.store.dialect == request.param
    store.record("chatcmpl-1", "support-v2", "ab12", "llama.cpp", [], "an answer")
    return store


def test_a_changed_vote_is_the_answers_latest_rating_whoever_voted_in_between(feedback):
    first = feedback.rate("chatcmpl-1", "up", rater="web")
    feedback.rate("chatcmpl-1", "up", rater="ops")
    changed = feedback.rate("chatcmpl-1", "down", rater="web")
    assert changed["id"] == first["id"]  # the same row, one vote per rater
    rows = feedback.ratings()
    assert [(r["rater"], r["rating"]) for r in rows] == [("ops", "up"), ("web", "down")]
    assert thumbs(rows, "support-v2", "ab12") == {
        "thumbs_up": 0,
        "thumbs_down": 1,
        "thumbs_down_rate": 1.0,
    }
    feedback.rate("chatcmpl-1", "up", rater="ops")  # ops votes again: theirs is latest now
    assert thumbs(feedback.ratings(), "support-v2", "ab12")["thumbs_up"] == 1
    # a new answer rated after the re-votes stays after them
    feedback.record("chatcmpl-2", "support-v2", "ab12", "llama.cpp", [], "another")
    feedback.rate("chatcmpl-2", "down", rater="web")
    answers = [r["answer_id"] for r in feedback.ratings()]
    assert answers == ["chatcmpl-1", "chatcmpl-1", "chatcmpl-2"]
