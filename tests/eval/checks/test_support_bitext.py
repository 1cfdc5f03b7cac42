"""The support checks on the real Bitext training CSV, scoring its own reference answers: right
intent at the classifier's ceiling and near 1, nothing invented or leaked, the hand-off requests
handed off; the same answers moved to other rows' questions fail. The rows are read from
../shared/datasets/bitext/ and never copied into the repository."""

from __future__ import annotations

import csv

import pytest

from eval.checks.support import support_checks

HELD_OUT = 100  # the file's last rows are scored; the rows before them fit the classifier


@pytest.fixture(scope="module")
def bitext_rows(bitext_dir):
    path = bitext_dir / "bitext_v1_train.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return path, rows[-HELD_OUT:]


def test_reference_answers_reach_the_ceiling_and_invent_nothing(bitext_rows):
    path, rows = bitext_rows
    prompts, references = [r["instruction"] for r in rows], [r["response"] for r in rows]
    moved = references[7:] + references[:7]  # fluent answers to other rows' questions
    support = support_checks(
        prompts, references, {"base": references, "moved": moved}, str(path), {}
    )
    ceiling, ref = support["classifier"]["ceiling"], support["models"]["base"]
    assert support["column"] == "intent" and support["classifier"]["labels"] == 27
    assert support["classifier"]["rows"] == 4000 - HELD_OUT  # never the scored rows
    assert (
        ref["right_intent"] == ceiling and ceiling["rows"] == HELD_OUT and ceiling["rate"] >= 0.95
    )
    assert ref["invented"]["spans"] == 0 and ref["leaks"]["spans"] == 0, support["per_row"]["base"]
    assert support["handoff_intents"] == ["contact_human_agent"]
    wrong = support["models"]["moved"]["right_intent"]
    assert wrong["rate"] < 0.2, wrong
    assert support["seconds"] < 120
