"""knowledge/followups.py: a follow-up ("How long will that take?" after asking for a refund) is
searched and checked with the message it follows up; a clear new question is read alone."""

from __future__ import annotations

import pytest

from knowledge.followups import asked_in, follows_up
from knowledge.grounding import ground
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from serve.answer_check import run_check

ROWS = [
    ("I want a refund for my order", "We refund it to your card within 5 days.", "get_refund"),
    ("how do I get my money back", "Send the item back and we refund your card.", "get_refund"),
    ("refund my purchase please", "Your refund is on its way to your card.", "get_refund"),
    ("can I get a refund", "Yes: return the item and the refund follows.", "get_refund"),
    ("how long will delivery take", "Delivery takes 3 to 5 working days.", "delivery_period"),
    ("how long does shipping take", "Parcels arrive in 3 to 5 working days.", "delivery_period"),
    ("when will my parcel arrive", "It arrives 3 to 5 days after it ships.", "delivery_period"),
    ("how long until the package gets here", "Allow 3 to 5 working days.", "delivery_period"),
    ("change my shipping address", "Edit the address under My account.", "change_address"),
    ("I moved, update my address", "Update it under My account, Addresses.", "change_address"),
    ("new address for deliveries", "Add the new address under My account.", "change_address"),
    ("how do I edit my address", "Open My account and edit the address.", "change_address"),
]
REFUND = "I want a refund for my order"
FOLLOW_UP = "How long will that take?"


def chat(*said: str) -> list[dict]:
    """A conversation of the customer's messages, each answered by the bot."""
    out = []
    for text in said:
        out += [{"role": "user", "content": text}, {"role": "assistant", "content": "Sure."}]
    return out[:-1]


@pytest.fixture
def shelf(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEDESK_HOME", str(tmp_path))
    shelf = KnowledgeShelf()
    passages = [
        Passage(q, a, f"d.csv:train row {i}", "past_answer", q, y)
        for i, (q, a, y) in enumerate(ROWS, start=1)
    ]
    shelf.add("answers", passages, ["d.csv"])
    shelf.add("unlabelled", [Passage(q, a, "x", "past_answer", q) for q, a, _ in ROWS], ["x"])
    return shelf


def test_a_follow_up_is_grounded_in_what_it_follows_up(shelf):
    _, alone = ground(chat(FOLLOW_UP), "answers", shelf=shelf)
    assert alone.intent == "delivery_period"  # its own words are a delivery question's
    _, grounding = ground(chat(REFUND, FOLLOW_UP), "answers", shelf=shelf)
    assert grounding.intent == "get_refund" and grounding.earlier == 1
    assert grounding.shown[0][1].intent == "get_refund"
    assert grounding.record()["earlier_messages"] == 1
    assert "a follow-up: searched with the customer's earlier message" in grounding.line()


def test_a_clear_new_question_is_read_alone(shelf):
    _, grounding = ground(
        chat(REFUND, "Also, I moved: change my shipping address"), "answers", shelf=shelf
    )
    assert grounding.intent == "change_address" and grounding.earlier == 0
    assert "earlier_messages" not in grounding.record()
    assert "follow-up" not in grounding.line()


def test_a_follow_up_of_a_follow_up_reaches_back_to_the_request(shelf):
    version = shelf.get("answers")
    asked = asked_in(version, chat(REFUND, FOLLOW_UP, "and then?"))
    assert asked.earlier == 2 and asked.text.startswith(REFUND)
    # a clear request in between stops it there
    asked = asked_in(version, chat("change my shipping address", REFUND, FOLLOW_UP))
    assert asked.earlier == 1 and asked.text == f"{REFUND} {FOLLOW_UP}"


def test_without_intents_only_a_message_that_points_back_is_read_with_the_one_before(shelf):
    version = shelf.get("unlabelled")
    assert asked_in(version, chat(REFUND, FOLLOW_UP)).earlier == 1
    assert asked_in(version, chat(REFUND, "how long does shipping take")).earlier == 0
    assert follows_up("is it free?") and not follows_up("is shipping free for big orders?")


def test_the_check_before_sending_reads_the_follow_up_with_its_request(shelf):
    """Alone, "How long will that take?" asks about delivery: an answer about the refund was
    taken for a wrong one and replaced by the delivery answer."""
    grounding = {"knowledge": "answers", "version": "v1"}
    answer = "We refund it to your card within 5 days."
    result = run_check(chat(REFUND, FOLLOW_UP), answer, grounding, "bot", None)
    assert (result.outcome, result.asked, result.text) == ("ok", "get_refund", answer)
    alone = run_check(chat(FOLLOW_UP), answer, grounding, "bot", None)
    assert alone.outcome == "re-answered" and alone.asked == "delivery_period"
