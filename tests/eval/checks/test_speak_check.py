"""eval/checks/speak_check.py: how often the check before an answer is sent would act, counted
into an evaluation report, its summary.md and the Evaluate tab's notes."""

from __future__ import annotations

import sqlite3

from eval.checks.attach import attach_speak_check
from eval.checks.speak_check import knowledge_of, speak_checks
from eval.report import EvalReport, summary_markdown
from knowledge.answer_check import checker_for
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from ui.views.evaluation import support_note

ADDRESS = "To change the shipping address, open the order page and edit the delivery address."
ROWS = [
    ("where is my refund", "Your refund reaches your card within five working days.", "refund"),
    ("I want my money back", "We issued the refund; the money reaches your card soon.", "refund"),
    ("change my shipping address", ADDRESS, "address"),
    (
        "wrong delivery address on my order",
        "Edit the delivery address on the order page.",
        "address",
    ),
    ("cancel my order", "Your order is cancelled; nothing will be charged.", "cancel"),
    ("please cancel the order I placed", "The order is cancelled, you are not charged.", "cancel"),
]
# The cancel rows teach the classifiers but are articles, unlabelled once the classifiers are
# fitted (shelf_without_cancel_answers): nothing to re-answer a cancel question with.
PASSAGES = [
    Passage(q, a, f"row {i}", "article" if y == "cancel" else "past_answer", q, y)
    for i, (q, a, y) in enumerate(ROWS, start=1)
]
ASKED = [
    "my refund did not arrive",
    "the delivery address on my order is wrong",
    "I want to cancel the order",
]
ANSWERS = [
    "The refund reaches your card in a few days.",
    "Your refund is on its way.",
    "Your refund reaches your card soon.",
]


def report_with(answers: dict) -> EvalReport:
    samples = [
        {
            "index": i,
            "intent": None,
            "prompt": q,
            "reference": "",
            "answers": {m: a[i] for m, a in answers.items()},
        }
        for i, q in enumerate(ASKED)
    ]
    scores = {"bleu": 0.0, "rouge_l": 0.0, "perplexity": 1.0, "golden_passed": 0, "golden_total": 0}
    return EvalReport(
        "e1",
        "now",
        list(answers),
        {m: scores for m in answers},
        {},
        samples,
        {m: [] for m in answers},
        {},
        support={"models": {}, "skipped": {}, "notes": []},
    )


def shelf_without_cancel_answers() -> None:
    version, _ = KnowledgeShelf().add("answers-tiny", PASSAGES, ["tiny.csv"])
    checker_for(version)  # fitted (and kept) while the cancel questions are labelled
    with sqlite3.connect(version.index_path) as db:
        db.execute("UPDATE passages SET intent = '' WHERE kind = 'article'")


def test_each_outcome_is_counted_per_model_in_the_report(home):
    shelf_without_cancel_answers()
    manifests = {"a": {"knowledge": {"name": "answers-tiny", "version": "v1"}}}
    report = report_with({"base": ANSWERS, "a": [ANSWERS[0], ADDRESS, ANSWERS[2]]})
    attach_speak_check(report, manifests, ["refund", "address", "cancel"])
    found = report.support["speak_check"]["models"]
    # base: right, wrong (re-answered from the address past answer), wrong with no cancel past
    # answer (handed off); a answered the address right.
    assert {k: found["base"][k] for k in ("ok", "re-answered", "handed off", "skipped")} == {
        "ok": 1,
        "re-answered": 1,
        "handed off": 1,
        "skipped": 0,
    }
    assert found["base"]["re-answered right"] == 1 and found["base"]["knowledge"] == (
        "answers-tiny v1"
    )
    assert (found["a"]["ok"], found["a"]["re-answered"], found["a"]["handed off"]) == (2, 0, 1)
    assert [s["speak_check"]["base"] for s in report.samples] == ["ok", "re-answered", "handed off"]
    line = (
        "checked before it speaks, base (answers-tiny v1; of 3 answers): ok 1, re-answered 1, "
        "handed off 1, skipped 0; re-answered with the row's intent 1"
    )
    assert line in summary_markdown(report) and line in support_note(report)


def test_a_model_without_knowledge_is_skipped_with_a_sentence(home):
    knowledge = knowledge_of({"a": {}}, ["base", "a"], ["a"])
    assert knowledge == {"a": None, "base": None}
    found = speak_checks(ASKED, {"a": ANSWERS}, knowledge)
    assert (
        found["models"]["a"]["skipped"] == 3
        and "no knowledge version" in found["models"]["a"]["note"]
    )
