"""The judge in the release gate: used only where it agrees with people, then its floors bite."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from adapters.shelf.gate_rules import DEFAULT_RULES, GateRulesError, check_rules, read_rules
from eval.gate import check
from eval.judge_agreement import agreement
from eval.judge_gate import judge_counts, judge_lines, judge_verdict
from eval.judge_grades import parse_grade, rates

GOOD = '{"addresses": 1, "correct": 1, "polite": 1, "safe": 1}'
OFF_TOPIC = '{"addresses": 0, "correct": 0, "polite": 1, "safe": 1}'
# 24 rated answers: the judge agrees on 22 (kappa 0.83); on 12 it disagrees on 6 (kappa 0)
AGREES = ([1] * 12 + [0] * 12, [1] * 11 + [0] + [0] * 11 + [1])
DISAGREES = ([1] * 6 + [0] * 6, [1] * 3 + [0] * 3 + [1] * 3 + [0] * 3)


def judged(replies: list[str], pairs=AGREES, problem=None) -> dict:
    return {
        "judge": {"model": "big-judge", "url": "http://127.0.0.1:1/v1"},
        "rates": {"tuned": rates([parse_grade(r) for r in replies])},
        "agreement": agreement(*pairs),
        "review": {"matched_in_eval": 2, "graded": 22},
        "problem": problem,
        "seconds": 1.5,
    }


def verdict(judge: dict | None, **judge_rules) -> dict:
    """The gate's verdict with only the judge's rules on (the other rules switched off)."""
    rules = check_rules(
        {
            "slices_not_worse": [],
            "golden_not_worse": False,
            "perplexity_not_worse": False,
            "floors": {"right_intent_min": None, "intent_min": None, "handoff_min": None},
            "judge": judge_rules,
        }
    )
    report = SimpleNamespace(slices={}, deltas={"tuned": {}}, golden={}, judge=judge)
    return check(report, "tuned", rules)


def test_a_judge_that_agrees_with_people_fails_off_topic_answers_with_its_figure():
    v = verdict(judged([GOOD] * 8 + [OFF_TOPIC] * 2))
    assert v["state"] == "failed"
    assert v["reasons"] == ["judge: 80% of answers address the question (8/10 graded; floor 85%)"]
    assert v["notes"] == [
        "the judge (big-judge) counts: kappa 0.83 with people on 24 rated answers (raw "
        "agreement 92%, floor 0.6); addresses 80%, correct 80%, polite 100%, safe 100% of 10 graded"
    ]
    assert verdict(judged([GOOD] * 9 + [OFF_TOPIC]))["state"] == "passed"  # 90 % >= 85 %
    # each floor is the team's to set
    assert (
        verdict(judged([GOOD] * 8 + [OFF_TOPIC] * 2), min_addresses_rate=0.8, min_correct_rate=0.5)[
            "state"
        ]
        == "passed"
    )


def test_below_the_kappa_floor_the_judge_is_ignored_and_the_note_says_why():
    v = verdict(judged([OFF_TOPIC] * 10, pairs=DISAGREES), min_rated=10)
    assert v["state"] == "passed" and v["reasons"] == []
    assert v["notes"] == [
        "the judge (big-judge) was ignored: its agreement with people is kappa 0.00 on 12 "
        "rated answers (raw 50%), below the floor of 0.6"
    ]


def test_too_few_ratings_a_broken_judge_or_unreadable_replies_are_not_used():
    assert (
        verdict(judged([OFF_TOPIC] * 10))["state"] == "failed"
    )  # 24 rated answers are enough by default
    assert verdict(judged([OFF_TOPIC] * 10), min_rated=30)["reasons"] == []  # but not for this team
    note = verdict(judged([OFF_TOPIC] * 10), min_rated=30)["notes"][0]
    assert note.startswith(
        "the judge (big-judge) was ignored: only 24 answers were rated by both people and the "
        "judge (at least 30 needed"
    )
    down = verdict(judged([OFF_TOPIC] * 10, problem="the judge at X could not be reached"))
    assert down["notes"] == [
        "the judge (big-judge) was ignored: the judge at X could not be reached"
    ]
    noisy = verdict(judged([OFF_TOPIC] * 8 + ["no idea"] * 2))
    assert noisy["state"] == "passed"
    assert (
        "20% of its replies on tuned's answers were unparseable (at most 10%), so it was not used"
        in noisy["notes"][0]
    )


def test_no_judge_changes_nothing():
    assert judge_verdict(None, "tuned") == ([], [])
    assert verdict(None) == verdict({})
    assert judge_counts(None) == (False, "no judge was asked")


def test_judge_lines_show_rates_agreement_and_each_gates_use():
    judge = judged([GOOD] * 9 + ["??"])
    gate = {"tuned": {"rules": check_rules({})}, "broken": {"rules": None}}
    lines = judge_lines(judge, gate)
    assert lines[0] == "judge big-judge at http://127.0.0.1:1/v1 (1.5 s):"
    assert (
        lines[1] == "  tuned: addresses 100%, correct 100%, polite 100%, safe 100% of 9 graded (1 "
        "unparseable)"
    )
    assert lines[2] == (
        "  agreement with people: 24 rated answers (2 from this evaluation, 22 from the review "
        "queue), raw agreement 92%, kappa 0.83"
    )
    assert (
        lines[3].startswith("  release gate of tuned: the judge (big-judge) counts: kappa 0.83")
        and len(lines) == 4
    )


def test_gate_json_judge_rules_default_and_are_checked(tmp_path):
    assert read_rules(tmp_path)["judge"] == DEFAULT_RULES["judge"]
    assert check_rules({"judge": {"min_kappa": 0.7}})["judge"] == {
        **DEFAULT_RULES["judge"],
        "min_kappa": 0.7,
    }
    (tmp_path / "gate.json").write_text(
        json.dumps(
            {
                "judge": {
                    "min_kappa": 2,
                    "min_rated": 0.5,
                    "min_safe_rate": -1,
                    "min_polite": 1,
                    "min_correct_rate": True,
                }
            }
        )
    )
    with pytest.raises(GateRulesError) as err:
        read_rules(tmp_path)
    text = str(err.value)
    for part in (
        "unknown judge rule 'min_polite'",
        "judge.min_kappa must be a number from -1 to 1, got 2",
        "judge.min_rated must be a whole number of at least 1, got 0.5",
        "judge.min_safe_rate must be a number from 0 to 1, got -1",
        "judge.min_correct_rate must be a number from 0 to 1, got True",
    ):
        assert part in text
    with pytest.raises(GateRulesError, match="judge must be an object"):
        check_rules({"judge": ["min_kappa"]})
