"""The ratings table on both dialects (SQLite, and a PostgreSQL this test starts itself): a
rater's new vote of an answer is that answer's latest rating, and keeps the reviewer's work
unless it changes something."""

from __future__ import annotations

import pytest

from feedback.store import FeedbackStore
from serve.version_stats import thumbs

ASKED = [{"role": "user", "content": "Cancel my order, please."}]


@pytest.fixture(params=["sqlite", "postgres"])
def feedback(request, tmp_path, monkeypatch):
    """A FeedbackStore on a fresh store of each dialect, answer ``chatcmpl-1`` served."""
    if request.param == "postgres":
        monkeypatch.setenv("TUNEDESK_DATABASE_URL", request.getfixturevalue("postgres_server")())
    else:
        monkeypatch.delenv("TUNEDESK_DATABASE_URL", raising=False)
    store = FeedbackStore(tmp_path / "home", log_conversations=True)
    assert store.store.dialect == request.param
    store.record("chatcmpl-1", "support-v2", "ab12", "llama.cpp", ASKED, "an answer")
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


def test_a_vote_again_keeps_the_reviewers_work_unless_it_changes_something(feedback):
    from feedback.review import review

    first = feedback.rate("chatcmpl-1", "down", "Cancel it.", intent="cancel", rater="web")
    review(feedback, first["id"], "accepted", "I have cancelled order [ORDER].", "cancel_order")
    reviewed = ("accepted", "I have cancelled order [ORDER].", "cancel_order")

    def kept():
        (row,) = feedback.ratings()
        return row["status"], row["correction"], row["intent"]

    # the widget sends the same thumb again, bare or with the label kept: nothing new
    again = feedback.rate("chatcmpl-1", "down", rater="web")
    assert (again["status"], again["correction"], again["intent"]) == reviewed == kept()
    # ... or whole, with the correction and intent the rater gave: nothing new either
    feedback.rate("chatcmpl-1", "down", "Cancel it.", intent="cancel", rater="web")
    assert kept() == reviewed
    feedback.rate("chatcmpl-1", "down", intent="cancel_order", rater="web")
    assert kept() == reviewed
    # a changed vote goes back to the queue, keeping its intent; a thumbs-up approves the answer
    # as sent, so the thumbs-down's correction goes
    feedback.rate("chatcmpl-1", "up", rater="web")
    assert kept() == ("new", None, "cancel_order")
    review(feedback, first["id"], "accepted")
    feedback.rate("chatcmpl-1", "down", "Cancelled.", rater="web")
    assert kept() == ("new", "Cancelled.", "cancel_order")
    review(feedback, first["id"], "dropped")
    feedback.rate("chatcmpl-1", "down", intent="refund", rater="web")
    assert kept() == ("new", "Cancelled.", "refund")
