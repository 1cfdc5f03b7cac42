"""Agreement between the judge and people: the review queue's ratings matched to answers, kappa."""

from __future__ import annotations

import pytest

from eval.judge_agreement import agreement, human_labels, match_key, review_items
from feedback.review import review
from feedback.store import FeedbackStore


def test_kappa_is_scikit_learns_and_matches_the_hand_computed_value():
    # 8 answers: both pass 3, people only 1, judge only 1, both fail 3.
    # observed 6/8 = 0.75; by chance 0.5 * 0.5 + 0.5 * 0.5 = 0.5; kappa = (0.75 -
    # 0.5) / (1 - 0.5) = 0.5
    human = [1, 1, 1, 1, 0, 0, 0, 0]
    judge = [1, 1, 1, 0, 1, 0, 0, 0]
    a = agreement(human, judge)
    assert (
        a["n"],
        a["agree"],
        a["both_pass"],
        a["human_only"],
        a["judge_only"],
        a["both_fail"],
    ) == (8, 6, 3, 1, 1, 3)
    assert a["raw"] == 0.75
    assert a["kappa"] == pytest.approx(0.5)
    # Unbalanced: people 7 up / 3 down, judge agrees on 8. p_o 0.8, p_e 0.7*0.7 + 0.3*0.3 = 0.58
    human = [1] * 7 + [0] * 3
    judge = [1] * 6 + [0] + [0, 0, 1]
    assert agreement(human, judge)["kappa"] == pytest.approx((0.8 - 0.58) / (1 - 0.58))
    assert agreement([1, 0, 1], [0, 1, 0])["kappa"] == pytest.approx(-0.8)  # worse than chance


def test_kappa_undefined_is_said_not_guessed():
    none = agreement([], [])
    assert (none["n"], none["raw"], none["kappa"]) == (0, None, None)
    assert "no answer was rated" in none["kappa_note"]
    same = agreement([1, 1, 1], [1, 1, 1])
    assert same["raw"] == 1.0 and same["kappa"] is None and "same verdict" in same["kappa_note"]
    with pytest.raises(ValueError, match="2 human ratings but 1 judge"):
        agreement([1, 0], [1])


TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Refund order 55123 to jo@example.com"},
]


@pytest.fixture
def store(home):
    store = FeedbackStore(log_conversations=True)
    for i, (answer, ratings) in enumerate(
        [
            ("Refund started for jo@example.com.", ["up", "up", "down"]),
            ("No refunds.", ["down"]),
            ("Maybe.", ["up", "down"]),
            ("Dropped one.", ["up"]),
        ]
    ):
        store.record(f"a{i}", "support", "v1", "pytorch", TURNS, answer)
        rows = [store.rate(f"a{i}", r) for r in ratings]
    review(store, rows[0]["id"], "dropped")  # the last answer's only rating: a reviewer dropped it
    store.record("n", "support", "v1", "pytorch", TURNS, "Not logged")
    store.log_conversations = False
    store.record("x", "support", "v1", "pytorch", TURNS, "kept in memory only")
    store.rate("x", "down")
    return store


def test_human_labels_take_the_majority_and_leave_out_ties_dropped_and_unlogged(store):
    labels, counts = human_labels(store.ratings())
    # The store keeps redacted text; the evaluation's raw text matches it once redacted too.
    question = "Refund order 55123 to jo@example.com"
    assert labels == {
        match_key(question, "Refund started for  jo@example.com."): 1,
        match_key(question, "No refunds."): 0,
    }
    assert counts == {"used": 6, "dropped": 1, "no_text": 1, "tied": 1}
    assert match_key(question, "x")[0] == "Refund order [ORDER] to [EMAIL]"


def test_review_items_are_the_labelled_answers_newest_first_once_each(store):
    items = review_items(store.ratings(), 10)
    assert [(x["answer"], x["human"]) for x in items] == [
        ("No refunds.", 0),
        ("Refund started for [EMAIL].", 1),
    ]
    assert items[0]["question"] == "Refund order [ORDER] to [EMAIL]"
    assert [x["answer"] for x in review_items(store.ratings(), 1)] == ["No refunds."]
    assert review_items(store.ratings(), 10, skip={items[0]["key"]}) == items[1:]
