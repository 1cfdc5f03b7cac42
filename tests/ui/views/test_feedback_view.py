"""Chat's and Compare's ratings: one vote per answer and page session."""

from __future__ import annotations

from feedback.store import FeedbackStore
from ui.views.feedback import rate_chat_answer, save_feedback

HISTORY = [
    {"role": "user", "content": "Where is my order?"},
    {"role": "assistant", "content": "It ships today."},
]
PANES = [
    {"adapter": "base", "adapter_hash": "b0", "text": "Hello."},
    {"adapter": "support", "adapter_hash": "s1", "text": "It ships today."},
]


def test_a_session_rating_the_same_chat_answer_again_replaces_its_vote(home):
    first = rate_chat_answer(HISTORY, 1, "up", "support", "s1", "pytorch", rater="session-a")
    again = rate_chat_answer(
        HISTORY, 1, "down", "support", "s1", "pytorch", "It ships Monday.", rater="session-a"
    )
    other = rate_chat_answer(HISTORY, 1, "up", "support", "s1", "pytorch", rater="session-b")
    rows = FeedbackStore().ratings()
    assert again["id"] == first["id"] != other["id"]
    assert [(r["rater"], r["rating"], r["correction"]) for r in rows] == [
        ("session-a", "down", "It ships Monday."),
        ("session-b", "up", None),
    ]
    changed = [{**HISTORY[0]}, {"role": "assistant", "content": "It ships tomorrow."}]
    rate_chat_answer(changed, 1, "up", "support", "s1", "pytorch", rater="session-a")
    assert len(FeedbackStore().ratings()) == 3  # another answer: a vote of its own


def test_a_session_giving_a_new_compare_verdict_on_the_same_panes_replaces_its_vote(home):
    _, first = save_feedback("Where is my order?", PANES, "support", rater="session-a")
    _, again = save_feedback(
        "Where is my order?", PANES, None, "It ships Monday.", rater="session-a"
    )
    assert again[0]["id"] == first[0]["id"]  # base lost both times: its vote replaced
    rows = FeedbackStore().ratings()  # the written answer beats the support pane too, now
    assert [(r["adapter"], r["correction"]) for r in rows] == [
        ("base", "It ships Monday."),
        ("support", "It ships Monday."),
    ]
