"""The feedback store: answers remembered by id, ratings kept per adapter version, personal
data redacted, conversations only when logging is on, bad input refused with nothing written."""

from __future__ import annotations

import json

import pytest

from feedback.store import MAX_CORRECTION_CHARS, FeedbackStore

ASKED = [{"role": "user", "content": "My email is jo.doe@example.com, where is order 88231?"}]


def test_a_logged_answer_is_rated_with_its_version_and_redacted_conversation(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-1", "support-v2", "ab12cd34", "llama.cpp q8_0", ASKED, "Write to jo.doe@example.com")
    row = store.rate("chatcmpl-1", "down", "Order [ORDER] ships Monday; call +44 20 7946 0958.")
    assert (row["adapter"], row["version"], row["engine"], row["rating"]) == ("support-v2", "ab12cd34", "llama.cpp q8_0", "down")
    assert row["messages"] == [{"role": "user", "content": "My email is [EMAIL], where is order [ORDER]?"}]
    assert row["answer"] == "Write to [EMAIL]" and "[PHONE]" in row["correction"] and row["status"] == "new"
    saved = (home / "feedback" / "ratings.jsonl").read_text()
    assert "example.com" not in saved and "7946" not in saved
    # a restart forgets what it remembered, not what it logged
    again = FeedbackStore(log_conversations=True)
    assert again.rate("chatcmpl-1", "up")["messages"] == row["messages"]
    assert [r["rating"] for r in again.ratings()] == ["down", "up"]


def test_without_logging_a_rating_names_the_version_but_keeps_no_conversation(home):
    store = FeedbackStore()
    store.record("chatcmpl-2", "base", "ffee0011", "pytorch float32, batched", ASKED, "an answer")
    row = store.rate("chatcmpl-2", "up")
    assert row["messages"] is None and row["answer"] is None and row["version"] == "ffee0011"
    assert not (home / "feedback" / "answers.jsonl").exists()
    with pytest.raises(KeyError):
        FeedbackStore().rate("chatcmpl-2", "up")  # not logged: gone after a restart


def test_bad_ratings_are_refused_and_nothing_is_written(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-3", "base", "ffee0011", "pytorch", ASKED, "x")
    for rating, correction, words in [("meh", None, "rating must be"), ("up", 5, "correction must be a string"),
                                      ("down", "x" * (MAX_CORRECTION_CHARS + 1), "at most")]:
        with pytest.raises(ValueError, match=words):
            store.rate("chatcmpl-3", rating, correction)
    with pytest.raises(KeyError):
        store.rate("chatcmpl-nope", "up")
    assert not (home / "feedback" / "ratings.jsonl").exists()
    (home / "feedback" / "ratings.jsonl").write_text('{"rating": "up", "id": "fb-1"}\n{torn\n')
    assert [r["id"] for r in store.ratings()] == ["fb-1"]  # a torn line is skipped, not fatal
    assert json.loads((home / "feedback" / "answers.jsonl").read_text())["id"] == "chatcmpl-3"


def test_a_rating_carries_the_intent_its_caller_gives_and_a_bad_one_is_refused(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-4", "base", "ffee0011", "pytorch", ASKED, "x")
    assert store.rate("chatcmpl-4", "down", intent="  track_order ")["intent"] == "track_order"
    assert store.rate("chatcmpl-4", "up", intent="  ")["intent"] is None  # blank: no intent
    assert store.rate("chatcmpl-4", "up")["intent"] is None
    before = (home / "feedback" / "ratings.jsonl").read_text()
    for intent, words in [(3, "must be a string"), ("a\nb", "one line"), ("x" * 81, "at most 80")]:
        with pytest.raises(ValueError, match=words):
            store.rate("chatcmpl-4", "up", intent=intent)
    assert (home / "feedback" / "ratings.jsonl").read_text() == before
