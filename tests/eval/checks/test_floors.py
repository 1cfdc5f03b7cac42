"""The gate's floors on real support checks of hand-written answers: each floor named with its
figure in the verdict, broken ones failing it, unchecked ones said and not failing it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from adapters.shelf.gate_rules import GateRulesError, check_rules, parse_setting
from eval.checks.support import CheckSettings, support_checks
from eval.gate import check, gate_lines

TOPICS = {
    "track_order": (
        "where is my parcel {i}",
        "Your parcel {i} is on its way; the tracking page shows where it is.",
    ),
    "get_refund": (
        "I want my money back {i}",
        "Your refund {i} goes back to your card within 5 days.",
    ),
    "contact_human_agent": (
        "let me talk to a person {i}",
        "I'll connect you with a live agent now ({i}).",
    ),
}
EVALUATED = 6  # rows of each intent evaluated (the last ones); the rest fit the classifier
# Only the gate's floors: the statistical rules need real scores.
RULES = {"slices_not_worse": [], "golden_not_worse": False, "perplexity_not_worse": False}


def write_data(path, labelled=True):
    rows = [
        {"prompt": p.format(i=i), "response": r.format(i=i), **({"intent": k} if labelled else {})}
        for i in range(20)
        for k, (p, r) in TOPICS.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluated = rows[-EVALUATED * len(TOPICS) :]
    return [r["prompt"] for r in evaluated], [r["response"] for r in evaluated]


def report_of(prompts, references, texts, data, settings=None):
    support = support_checks(prompts, references, texts, str(data), settings or {})
    per_row = support.pop("per_row")
    samples = [
        {
            "index": i,
            "prompt": p,
            "answers": {m: texts[m][i] for m in texts},
            "checks": {m: per_row[m][i] for m in texts},
        }
        for i, p in enumerate(prompts)
    ]
    return SimpleNamespace(
        adapters=list(texts)[1:],
        support=support,
        samples=samples,
        slices={},
        against={},
        deltas={m: {} for m in texts},
        golden={"total": 0, "results": []},
    )


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    data = tmp_path_factory.mktemp("floors") / "support.jsonl"
    prompts, references = write_data(data)
    # good: the references; wrong: every answer moved to the next row's (another
    # intent), one invented phone
    wrong = references[1:] + references[:1]
    wrong[0] += " Call 0161 496 0000."
    return report_of(
        prompts, references, {"base": references, "good": list(references), "wrong": wrong}, data
    )


def test_a_good_adapter_passes_with_every_floor_named_with_its_figure(evaluated):
    verdict = check(evaluated, "good", check_rules(RULES))
    assert verdict["state"] == "passed", verdict["reasons"]
    text = "; ".join(verdict["floors"])
    assert (
        "right-intent rate 1.00 (18/18 rows; the classifier's ceiling on the references 1.00) "
        "reaches the floor 0.85" in text
    )
    assert "lowest intent contact_human_agent 1.00 (6/6) reaches the per-intent floor 0.50" in text
    assert (
        "hand-off rate 1.00 (6/6 requests for a person handed off; 0 hand-offs nobody asked for"
        in text
    )
    assert (
        "0 invented contact details (phone, e-mail, URL) in 0 answer(s), within the allowed 0"
        in text
    )
    assert "0 leaked personal data" in text
    assert "right-intent rate 1.00" in gate_lines(SimpleNamespace(gate={"good": verdict}))[0]


def test_answers_to_the_wrong_question_fail_the_floors_by_name(evaluated):
    verdict = check(evaluated, "wrong", check_rules(RULES))
    assert verdict["state"] == "failed"
    reasons = "; ".join(verdict["reasons"])
    assert (
        "right-intent rate 0.00 (0/18 rows; the classifier's ceiling on the references 1.00) is "
        "below the floor 0.85" in reasons
    )
    assert "3 intent(s) below the per-intent floor 0.50" in reasons
    assert (
        "hand-off rate 0.00 (0/6 requests" in reasons
        and "6 hand-offs nobody asked for in 12 other rows" in reasons
    )
    assert (
        "1 invented contact details (phone, e-mail, URL) in 1 answer(s): 0161 496 0000, above "
        "the allowed 0" in reasons
    )
    # each floor can be switched off or moved
    relaxed = check_rules(
        {
            **RULES,
            "floors": {
                "right_intent_min": None,
                "intent_min": 0.0,
                "handoff_min": None,
                "invented_contact_max": 1,
            },
        }
    )
    assert check(evaluated, "wrong", relaxed)["state"] == "passed"


def test_data_without_labels_skips_the_intent_floors_and_says_so(tmp_path):
    data = tmp_path / "unlabelled.jsonl"
    prompts, references = write_data(data, labelled=False)
    report = report_of(
        prompts, references, {"base": references, "tuned": references[1:] + references[:1]}, data
    )
    assert "no label column: add an `intent` column" in report.support["skipped"]["intent"]
    verdict = check(report, "tuned", check_rules(RULES))
    floors = "; ".join(verdict["floors"])  # the verdict says what it could not check ...
    assert (
        "right-intent floor 0.85 not checked: the data has no label column: add an `intent` column"
        in floors
    )
    assert "hand-off floor 0.90 not checked" in floors and "0 leaked personal data" in floors
    # ... and, having judged no answer's intent, it does not say "passed"
    assert verdict["state"] == "failed" and len(verdict["reasons"]) == 1
    assert verdict["reasons"][0].startswith("no answer-quality floor could be checked (")
    assert "the gate passes only on what it checked" in verdict["reasons"][0]
    # each floor's own sentence is said once, among the floors, not again in the reason
    assert "not checked" not in verdict["reasons"][0]
    assert "(right intent, per intent, hand-off: each floor says why)" in verdict["reasons"][0]
    off = {"right_intent_min": None, "intent_min": None, "handoff_min": None}
    chosen = check(report, "tuned", check_rules({**RULES, "floors": off}))
    assert chosen["state"] == "passed"  # the team switched them off in gate.json: its choice


def test_custom_handoff_settings_and_a_missing_handoff_intent(evaluated, tmp_path):
    data = tmp_path / "d.jsonl"
    prompts, references = write_data(data)
    settings = {
        "tuned": CheckSettings(
            handoff_intents=["get_refund"], handoff_phrases=["goes back to your card"]
        )
    }
    report = report_of(
        prompts, references, {"base": references, "tuned": references}, data, settings
    )
    h = report.support["models"]["tuned"]["handoff"]
    assert (h["intents"], h["due"], h["given"], h["unasked"]) == (["get_refund"], 6, 6, 0)


def test_floors_in_gate_json_are_checked_and_set_from_the_command_line():
    rules = check_rules({"floors": {"right_intent_min": 0.9}})
    assert (
        rules["floors"]["right_intent_min"] == 0.9 and rules["floors"]["leaks_max"] == 0
    )  # defaults fill in
    with pytest.raises(GateRulesError) as err:
        check_rules(
            {"floors": {"right_intent_min": 1.5, "leaks_max": -1, "typo": 1}, "handoff_intents": []}
        )
    for part in (
        "floors.right_intent_min must be a share from 0 to 1",
        "floors.leaks_max must be a whole number",
        "unknown floor 'typo'",
        "handoff_intents must be a non-empty list",
    ):
        assert part in str(err.value)
    assert parse_setting("floors.right_intent_min=0.9") == ("floors", {"right_intent_min": 0.9})
    assert parse_setting("floors.invented_max=none") == ("floors", {"invented_max": None})
    assert parse_setting("handoff_intents=escalate,contact_human_agent") == (
        "handoff_intents",
        ["escalate", "contact_human_agent"],
    )
    with pytest.raises(GateRulesError, match="unknown floor 'nope'"):
        parse_setting("floors.nope=1")


def test_the_floors_read_the_grounded_answers_when_the_adapter_is_served_grounded(tmp_path):
    """As eval/grounded.py leaves them: the grounded answers checked under "tuned (grounded)"."""
    data = tmp_path / "support.jsonl"
    prompts, references = write_data(data)
    wrong = references[1:] + references[:1]  # the plain answers answer another intent
    texts = {"base": references, "tuned": wrong, "tuned (grounded)": list(references)}
    support = support_checks(prompts, references, texts, str(data), {})
    per_row = support.pop("per_row")
    grounded = support["models"].pop("tuned (grounded)")
    plain = report_of(prompts, references, {"base": references, "tuned": wrong}, data)
    failed = check(plain, "tuned", check_rules(RULES))
    assert failed["state"] == "failed" and failed["grounding"] == "off"
    plain.grounding = {
        "knowledge": {"base": "faq v1", "tuned": "faq v1"},
        "support": {"tuned": grounded},
        "skipped": {},
    }
    for sample, row in zip(plain.samples, per_row["tuned (grounded)"], strict=True):
        sample["grounded"] = {"checks": {"tuned": row}}
    verdict = check(plain, "tuned", check_rules(RULES))
    assert verdict["state"] == "passed", verdict["reasons"]
    assert verdict["grounding"] == "faq v1"
    assert "right-intent rate 1.00 (18/18 rows" in "; ".join(verdict["floors"])
    assert (
        "the floors were checked on the answers grounded in faq v1, as an alias on auto serves "
        "this adapter (without it: right-intent rate 0.00)" in verdict["notes"]
    )
    line = gate_lines(SimpleNamespace(gate={"tuned": verdict}))[0]
    assert line.startswith("release gate of tuned on answers grounded in faq v1: passed")
