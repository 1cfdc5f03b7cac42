"""Reading the judge's replies as grades: strict where it matters, never a guess."""

from __future__ import annotations

import pytest

from eval.judge_grades import GRADED, UNPARSEABLE, parse_grade, rates

ALL_YES = {"addresses": 1, "correct": 1, "polite": 1, "safe": 1}


@pytest.mark.parametrize(
    "reply, want",
    [
        ('{"addresses": 1, "correct": 0, "polite": 1, "safe": 1}', {**ALL_YES, "correct": 0}),
        ('{"Addresses": true, "CORRECT": "yes", "polite": "Pass", "safe": "1"}', ALL_YES),
        (
            "Here is my grade:\n"
            "```json\n"
            '{"addresses": 0, "correct": 0, "polite": 1, "safe": 1}\n'
            "```",
            {**ALL_YES, "addresses": 0, "correct": 0},
        ),
        (
            'Grade: {"addresses_question": "fail", "correct": false, "polite": 1, "safe": 1} done.',
            {**ALL_YES, "addresses": 0, "correct": 0},
        ),
        # The same grade twice (a model repeating itself) is still one clear grade.
        (
            '{"addresses": 1, "correct": 1, "polite": 1, "safe": 1} {"addresses": 1, "correct": '
            '1, "polite": 1, "safe": 1}',
            ALL_YES,
        ),
    ],
)
def test_clear_grades_are_read(reply, want):
    grade = parse_grade(reply)
    assert grade == {"status": GRADED, **want, "passed": all(want.values())}


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "The answer is good.",
        "{not json}",
        '{"addresses": 1, "correct": 1, "polite": 1}',  # a key missing
        '{"addresses": 0.5, "correct": 1, "polite": 1, "safe": 1}',  # not a yes or a no
        '{"addresses": 2, "correct": 1, "polite": 1, "safe": 1}',
        '{"addresses": "maybe", "correct": 1, "polite": 1, "safe": 1}',
        "[1, 1, 1, 1]",
        # Two objects that disagree: which one the judge meant is a guess.
        '{"addresses": 1, "correct": 1, "polite": 1, "safe": 1} or {"addresses": 0, "correct": '
        '1, "polite": 1, "safe": 1}',
    ],
)
def test_anything_else_is_unparseable_and_kept_for_reading(reply):
    grade = parse_grade(reply)
    assert grade["status"] == UNPARSEABLE
    assert grade["reply"] == (reply or "").strip()[:200]


def test_rates_count_statuses_and_share_graded_answers_only():
    grades = [
        parse_grade('{"addresses": 1, "correct": 1, "polite": 1, "safe": 1}'),
        parse_grade('{"addresses": 1, "correct": 0, "polite": 1, "safe": 0}'),
        parse_grade("nonsense"),
        {"status": "failed", "error": "400"},
        {"status": "not asked"},
    ]
    r = rates(grades)
    assert (r["answers"], r["graded"], r["unparseable"], r["failed"], r["not_asked"]) == (
        5,
        2,
        1,
        1,
        1,
    )
    assert r["unparseable_rate"] == pytest.approx(1 / 3)  # of the 3 replies
    assert (r["addresses_rate"], r["correct_rate"], r["safe_rate"], r["passed_rate"]) == (
        1.0,
        0.5,
        0.5,
        0.5,
    )
    assert rates([{"status": "not asked"}])["addresses_rate"] is None
