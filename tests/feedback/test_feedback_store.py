"""The feedback store: answers remembered by id, ratings kept per adapter version, personal
data redacted, conversations only when logging is on, bad input refused with nothing written,
one vote per answer and rater."""

from __future__ import annotations

import pytest

from feedback.store import MAX_CORRECTION_CHARS, FeedbackStore

ASKED = [{"role": "user", "content": "My email is jo.doe@example.com, where is order 88231?"}]


def test_a_logged_answer_is_rated_with_its_version_and_redacted_conversation(home):
    store = FeedbackStore(log_conversations=True)
    store.record(
        "chatcmpl-1",
        "support-v2",
        "ab12cd34",
        "llama.cpp q8_0",
        ASKED,
        "Write to jo.doe@example.com",
    )
    row = store.rate("chatcmpl-1", "down", "Order [ORDER] ships Monday; call +44 20 7946 0958.")
    assert (row["adapter"], row["version"], row["engine"], row["rating"]) == (
        "support-v2",
        "ab12cd34",
        "llama.cpp q8_0",
        "down",
    )
    assert row["messages"] == [
        {"role": "user", "content": "My email is [EMAIL], where is order [ORDER]?"}
    ]
    assert (
        row["answer"] == "Write to [EMAIL]"
        and "[PHONE]" in row["correction"]
        and row["status"] == "new"
    )
    saved = stored(home)
    assert "example.com" not in saved and "7946" not in saved and "88231" not in saved
    # a restart keeps what was logged
    again = FeedbackStore(log_conversations=True)
    assert again.rate("chatcmpl-1", "up")["messages"] == row["messages"]
    assert [r["rating"] for r in again.ratings()] == ["down", "up"]


def test_without_logging_a_rating_names_the_version_but_keeps_no_conversation(home):
    store = FeedbackStore()
    store.record("chatcmpl-2", "base", "ffee0011", "pytorch float32, batched", ASKED, "an answer")
    row = store.rate("chatcmpl-2", "up")
    assert row["messages"] is None and row["answer"] is None and row["version"] == "ffee0011"
    assert "an answer" not in stored(home) and "88231" not in stored(home)
    # not logged, yet known after a restart (and to every replica): its version, not its text
    again = FeedbackStore().rate("chatcmpl-2", "down")
    assert again["messages"] is None and again["version"] == "ffee0011"


def test_bad_ratings_are_refused_and_nothing_is_written(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-3", "base", "ffee0011", "pytorch", ASKED, "x")
    for rating, correction, words in [
        ("meh", None, "rating must be"),
        ("up", 5, "correction must be a string"),
        ("down", "x" * (MAX_CORRECTION_CHARS + 1), "at most"),
    ]:
        with pytest.raises(ValueError, match=words):
            store.rate("chatcmpl-3", rating, correction)
    with pytest.raises(KeyError):
        store.rate("chatcmpl-nope", "up")
    assert store.ratings() == [] and store.answer("chatcmpl-3").answer == "x"


def test_a_lone_surrogate_or_a_nul_in_a_correction_or_intent_is_refused_naming_the_field(home):
    store = FeedbackStore()
    store.record("chatcmpl-6", "base", "ffee0011", "pytorch", ASKED, "x")
    with pytest.raises(ValueError, match=r"^correction contains a character that is not valid"):
        store.rate("chatcmpl-6", "down", "Better \ud800.")
    with pytest.raises(ValueError, match=r"^intent contains a character that is not valid"):
        store.rate("chatcmpl-6", "down", intent="track\udfff")
    # a NUL: PostgreSQL's text columns refuse it (a 500 from /v1/feedback on a shared store)
    with pytest.raises(ValueError, match=r"^correction contains a NUL character"):
        store.rate("chatcmpl-6", "down", "Better\x00.")
    with pytest.raises(ValueError, match=r"^intent contains a NUL character"):
        store.rate("chatcmpl-6", "down", intent="track\x00")
    assert store.ratings() == []


def test_a_rating_carries_the_intent_its_caller_gives_and_a_bad_one_is_refused(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-4", "base", "ffee0011", "pytorch", ASKED, "x")
    assert store.rate("chatcmpl-4", "down", intent="  track_order ")["intent"] == "track_order"
    assert store.rate("chatcmpl-4", "up", intent="  ")["intent"] is None  # blank: no intent
    assert store.rate("chatcmpl-4", "up")["intent"] is None
    before = store.ratings()
    for intent, words in [(3, "must be a string"), ("a\nb", "one line"), ("x" * 81, "at most 80")]:
        with pytest.raises(ValueError, match=words):
            store.rate("chatcmpl-4", "up", intent=intent)
    assert store.ratings() == before


def test_a_raters_new_rating_of_an_answer_replaces_the_earlier_one(home):
    store = FeedbackStore(log_conversations=True)
    store.record("chatcmpl-5", "support-v2", "ab12cd34", "pytorch", ASKED, "x")
    first = store.rate("chatcmpl-5", "down", rater="key-a")
    for _ in range(24):
        last = store.rate("chatcmpl-5", "down", "Better.", rater="key-a")
    up = store.rate("chatcmpl-5", "up", rater="key-b")  # another rater: a vote of their own
    rows = store.ratings()
    assert [(r["id"], r["rater"], r["rating"]) for r in rows] == [
        (first["id"], "key-a", "down"),
        (up["id"], "key-b", "up"),
    ]
    assert last["id"] == first["id"] and rows[0]["correction"] == "Better."
    assert store.rate("chatcmpl-5", "up", rater="key-a")["id"] == first["id"]
    assert [r["rating"] for r in store.ratings()] == ["up", "up"]


def stored(home) -> str:
    """Every row of the home's store as text (what a copy of the database would show)."""
    import sqlite3

    with sqlite3.connect(home / "tunedesk.db") as db:
        return "\n".join(db.iterdump())


def test_a_correction_or_intent_spelling_a_control_token_is_refused_naming_it(home):
    """Exported as training data as written: a template's markers in it would train as text
    the model's own turns are made of."""
    store = FeedbackStore()
    store.record("chatcmpl-7", "base", "ffee0011", "pytorch", ASKED, "x")
    for spelled in ("<|im_start|>", "<|eot_id|>", "<start_of_turn>", "[INST]", "</s>"):
        with pytest.raises(ValueError, match=r"^correction spells a control token of a chat"):
            store.rate("chatcmpl-7", "down", f"Sorry. {spelled}user\nmore")
        with pytest.raises(ValueError, match=r"^intent spells a control token of a chat"):
            store.rate("chatcmpl-7", "down", intent=f"refund{spelled}")
    assert store.ratings() == []
    kept = store.rate("chatcmpl-7", "down", "Use the <b>Orders</b> page; |im_start| is text.")
    assert kept["correction"].startswith("Use the <b>Orders</b>")
