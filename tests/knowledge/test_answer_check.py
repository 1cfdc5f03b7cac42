"""knowledge/answer_check.py: the check before an answer is sent, on a tiny labelled shelf."""

from __future__ import annotations

import sqlite3

import pytest

from knowledge.answer_check import HANDOFF, check_answer, checker_for
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs

REFUND = "Your refund is on its way: it reaches your card within five working days."
ADDRESS = "To change the shipping address, open the order page and edit the delivery address."
CANCEL = "Your order is cancelled; nothing will be charged and you get an email confirming it."
ROWS = [
    ("where is my refund", REFUND, "refund"),
    (
        "I want my money back",
        "We have issued the refund; the money reaches your card soon.",
        "refund",
    ),
    (
        "refund not received yet",
        "The refund was sent and lands on your card in a few days.",
        "refund",
    ),
    ("change my shipping address", ADDRESS, "address"),
    (
        "wrong delivery address on my order",
        "Edit the delivery address from the order page.",
        "address",
    ),
    (
        "update the address I ship to",
        "The shipping address can be changed on the order page.",
        "address",
    ),
    ("cancel my order", CANCEL, "cancel"),
    (
        "please cancel the order I placed",
        "The order is cancelled and you will not be charged.",
        "cancel",
    ),
    (
        "I no longer want this order",
        "We cancelled the order; a confirmation email is coming.",
        "cancel",
    ),
]


@pytest.fixture
def shelf(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    q, a, y = zip(*ROWS, strict=True)
    shelve_pairs(
        list(q),
        list(a),
        dataset_fingerprint="f1",
        data_path="tiny.csv",
        shelf=shelf,
        intents=list(y),
    )
    return shelf


def test_a_right_answer_passes(shelf):
    result = check_answer(
        "my refund has not arrived",
        "The refund reaches your card in days.",
        "answers-tiny",
        shelf=shelf,
    )
    assert (result.outcome, result.asked, result.answered) == ("ok", "refund", "refund")
    assert result.text == "The refund reaches your card in days."


def test_a_wrong_intent_answer_is_answered_again_from_the_nearest_past_answer(shelf):
    result = check_answer(
        "I need to change the shipping address on my order",
        "Your order is cancelled and will not be charged.",
        "answers-tiny",
        shelf=shelf,
    )
    assert (result.outcome, result.asked, result.answered) == ("re-answered", "address", "cancel")
    assert result.text == ADDRESS  # the best BM25 match among the address answers
    assert result.record()["passage_id"] == 4


def test_no_past_answer_of_the_asked_intent_hands_off(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    passages = [Passage(q, a, f"row {i}", "past_answer", q, y) for i, (q, a, y) in enumerate(ROWS)]
    # The address questions stay labelled, but no address answer is a past answer to re-answer with.
    passages = [
        p
        if p.intent != "address"
        else Passage(p.title, p.text, p.source, "article", p.question, p.intent)
        for p in passages
    ]
    version, _ = shelf.add("kb", passages, ["rows"])
    checker_for(version)  # fitted while the address questions are labelled
    with sqlite3.connect(version.index_path) as db:  # then no labelled article to answer with
        db.execute("UPDATE passages SET intent = '' WHERE kind = 'article'")
    result = check_answer(
        "change my shipping address please", "Your order is cancelled.", "kb", shelf=shelf
    )
    assert result.outcome == "handed off" and result.text == HANDOFF
    assert "no past answer of address" in result.note


def test_an_uncertain_question_hands_off(shelf):
    result = check_answer(
        "change my shipping address", REFUND, "answers-tiny", shelf=shelf, min_margin=100.0
    )
    assert result.outcome == "handed off" and "uncertain" in result.note


def test_a_version_without_intents_is_skipped_with_a_note(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    q, a, _ = zip(*ROWS, strict=True)
    version = shelve_pairs(
        list(q), list(a), dataset_fingerprint="f0", data_path="tiny.csv", shelf=shelf
    )
    with sqlite3.connect(version.index_path) as db:  # as a version from before intents reads
        db.execute("DROP INDEX passages_by_intent")
        db.execute("ALTER TABLE passages DROP COLUMN intent")
    assert version.passages_page()[0][1].intent == ""
    result = check_answer("cancel my order", REFUND, "answers-tiny", shelf=shelf)
    assert result.outcome == "skipped" and result.text == REFUND
    assert "keeps no intents" in result.note
    # Training again on the same data with labels makes a version that keeps them.
    again = shelve_pairs(
        list(q),
        list(a),
        dataset_fingerprint="f0",
        data_path="tiny.csv",
        shelf=shelf,
        intents=[y for *_, y in ROWS],
    )
    assert again.version == "v2"
    assert check_answer("cancel my order", REFUND, "answers-tiny", shelf=shelf).outcome == (
        "re-answered"
    )


def test_the_classifiers_are_fitted_once_per_version(shelf):
    version = shelf.get("answers-tiny")
    first, _ = checker_for(version)
    assert first is not None and checker_for(shelf.get("answers-tiny"))[0] is first
    assert sorted(first.questions.labels) == ["address", "cancel", "refund"]
