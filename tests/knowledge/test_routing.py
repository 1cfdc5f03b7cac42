"""knowledge/routing.py: a search routed to the past answers of the intent the customer asks
about, on a tiny labelled shelf where BM25 alone picks a past answer of another intent."""

from __future__ import annotations

import pytest

from knowledge.grounding import ground
from knowledge.passages import Passage
from knowledge.routing import likely_first, routed_search
from knowledge.store import KnowledgeShelf

ROWS = [
    ("cancel my order", "Your order is cancelled; nothing is charged.", "cancel_order"),
    ("please cancel the order I placed yesterday", "We cancelled that order.", "cancel_order"),
    ("I no longer want this order, cancel it", "The order is cancelled.", "cancel_order"),
    ("stop my order, cancel it now", "Cancelled: a confirmation email is coming.", "cancel_order"),
    ("modify the items in my order", "Edit its items on the order page.", "change_order"),
    ("modify my order", "You can modify an order from the order page.", "change_order"),
    ("modify a product in my order", "Swap products on the order page.", "change_order"),
    ("how to modify what I ordered", "Edit the order's items from the order page.", "change_order"),
]
ARTICLE = Passage("Yesterday's orders", "Orders from yesterday ship today.", "kb.md#Shipping")
# BM25 ranks the cancel_order row with the rare "yesterday" first; the question classifier,
# fitted on every question, reads "modify my order" as change_order with a clear lead.
ASKED = "modify my order yesterday"


def _past_answers() -> list[Passage]:
    return [
        Passage(q[:120], a, f"tiny.csv:train row {i}", "past_answer", q, y)
        for i, (q, a, y) in enumerate(ROWS, start=1)
    ]


@pytest.fixture
def shelf(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    shelf.add("answers", _past_answers(), ["tiny.csv"])
    shelf.add("mixed", [*_past_answers(), ARTICLE], ["tiny.csv", "kb.md"])
    shelf.add("unlabelled", [Passage(q, a, "x", "past_answer", q) for q, a, _ in ROWS], ["x"])
    return shelf


def test_a_clear_intent_searches_only_its_past_answers(shelf):
    version = shelf.get("answers")
    assert version.search(ASKED, 1)[0].passage.intent == "cancel_order"  # BM25 alone
    found = routed_search(version, ASKED, 3)
    assert found.intent == "change_order" and found.note == ""
    assert [h.passage.intent for h in found.hits] == ["change_order"] * 3
    assert found.hits[0].passage.question == "modify my order"


def test_passages_without_an_intent_stay_in_the_search(shelf):
    found = routed_search(shelf.get("mixed"), ASKED, 5)
    assert found.intent == "change_order"
    kinds = {(h.passage.kind, h.passage.intent) for h in found.hits}
    assert ("article", "") in kinds and ("past_answer", "cancel_order") not in kinds


def test_a_question_no_past_answer_of_the_named_intent_matches_is_not_routed(shelf):
    """A few labelled rows name an intent for anything: "does it ship today" (cancel_order, on
    the word "it") shares no word with a past answer of it the search matches; only the
    article does. The record must not say it was routed to that intent."""
    version = shelf.get("mixed")
    asked = "does it ship today"
    from knowledge.routing import asked_intent

    assert asked_intent(version, asked)[0]  # the classifier names one with a clear lead
    found = routed_search(version, asked, 1)
    assert found.intent == "" and "no past answer of" in found.note
    assert found.hits[0].passage.kind == "article"


def test_a_guess_an_unlabelled_version_or_route_off_search_every_passage(shelf):
    version = shelf.get("answers")
    unsure = routed_search(version, "I want to modify the order I placed yesterday", 2)
    assert unsure.intent == "" and "the asked intent is uncertain" in unsure.note
    assert unsure.hits[0].passage.intent == "cancel_order"  # as BM25 ranks it
    off = routed_search(version, ASKED, 2, route=False)
    assert off.intent == "" and [h.id for h in off.hits] == [h.id for h in version.search(ASKED, 2)]
    plain = routed_search(shelf.get("unlabelled"), ASKED, 1)
    assert plain.intent == "" and plain.note.startswith("not routed:")
    assert plain.hits[0].passage.question == "please cancel the order I placed yesterday"


def test_a_grounded_answer_is_shown_the_asked_intents_past_answer(shelf):
    messages, grounding = ground([{"role": "user", "content": ASKED}], "answers", shelf=shelf, k=1)
    assert "You can modify an order from the order page." in messages[0]["content"]
    assert "cancel" not in messages[0]["content"].lower()
    assert grounding.record()["intent"] == "change_order"
    assert grounding.line().endswith("(past answers about change_order)")
    _, plain = ground([{"role": "user", "content": ASKED}], "answers", shelf=shelf, route=False)
    assert "intent" not in plain.record() and plain.shown[0][1].intent == "cancel_order"


def test_the_search_users_try_is_the_one_grounding_makes(shelf):
    from knowledge import actions

    found = actions.search(ASKED, "answers", k=2, shelf=shelf)
    assert found["intent"] == "change_order"
    assert [p["intent"] for p in found["passages"]] == ["change_order", "change_order"]


@pytest.mark.parametrize("intents", [2, 3])
def test_one_pass_names_what_predict_and_margins_say(intents):
    from knowledge.intent_classifier import fit

    rows = [*ROWS, ("where is my parcel", "It ships today.", "track_order")] * 2
    kept = [r for r in rows if r[2] in ("cancel_order", "change_order", "track_order")[:intents]]
    classifier = fit([q for q, _, _ in kept], [y for _, _, y in kept])
    for text in (ASKED, "cancel it", "parcel", "modify the order placed yesterday", " "):
        assert classifier.named(text) == pytest.approx(
            (classifier.predict([text])[0], classifier.margins([text])[0])
        )


def test_the_passages_most_questions_route_to_come_first(shelf):
    version = shelf.get("answers")
    order = [pid for pid, _ in likely_first(version)]
    # "cancel my order" is the top hit of the three other cancel_order questions, "modify my
    # order" of two change_order ones; the rest keep the version's order
    assert order[:2] == [1, 6] and sorted(order) == list(range(1, 9))
    assert order[2:] == [2, 7, 8, 3, 4, 5]
    # two questions spread over the version (rows 1 and 5) reach rows 2 and 8 only
    assert [pid for pid, _ in likely_first(version, sample=2)][:3] == [2, 8, 1]
