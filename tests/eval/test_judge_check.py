"""`python -m eval judge-check`: the judge against the review queue's human
ratings, no model loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from judge_helpers import FakeJudge, closed_port_url, grades_by_word

from eval.__main__ import main
from feedback.store import FeedbackStore

RATED = [
    ("Where is my order?", "Your order ships today.", "up"),
    ("Cancel it", "It ships anyway.", "down"),
    ("Refund?", "Sorry, no idea.", "down"),
    ("Hi", "Hello! It ships free.", "up"),
    ("Address?", "Change it in your account.", "up"),
]


def fill_queue(adapter: str = "support") -> None:
    store = FeedbackStore(log_conversations=True)
    for i, (question, answer, rating) in enumerate(RATED):
        store.record(
            f"{adapter}{i}",
            adapter,
            "v1",
            "pytorch",
            [{"role": "user", "content": question}],
            answer,
        )
        store.rate(f"{adapter}{i}", rating)


def test_judge_check_prints_agreement_and_saves_it(home, capsys):
    fill_queue()
    fill_queue("other")  # the same answers by another adapter: filtered out below
    with FakeJudge(grades_by_word("ships")) as judge:
        code = main(
            ["judge-check", "--judge-url", judge.url, "--judge-model", "m", "--adapter", "support"]
        )
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(judge.requests) == 5
    # judge passes 1, 2, 4; people pass 1, 4, 5: both 2, people only 1, judge only 1, both fail 1
    assert out[1] == "agreement with people on 5 answers: raw 60%, Cohen's kappa 0.17"
    assert out[2] == "  both pass 2, people only 1, judge only 1, both fail 1"
    assert "  people up, judge down: Address? -> Change it in your account." in out
    assert "  people down, judge up: Cancel it -> It ships anyway." in out
    saved = json.loads(Path(out[-1].removeprefix("saved: ")).read_text())
    assert (
        saved["agreement"]["kappa"] == pytest.approx(1 / 6)
        and saved["asked"] == 5
        and "key" not in saved["judge"]
    )
    assert Path(out[-1].removeprefix("saved: ")).parent == home.resolve() / "evals" / "judge-checks"


def test_judge_check_bad_input_is_one_error_line(home, capsys):
    args = [
        "judge-check",
        "--judge-url",
        closed_port_url(),
        "--judge-model",
        "m",
        "--judge-retries",
        "0",
    ]
    assert main(args) == 2
    assert "the review queue holds no rated answer with its conversation" in capsys.readouterr().err
    fill_queue()
    assert main(args) == 1  # an unreachable judge: the saved result says so, nothing crashes
    out = capsys.readouterr().out
    assert "agreement with people on 0 answers: raw n/a" in out and "problem: the judge at" in out
    assert (
        main([*args, "--rows", "0"]) == 2 and "--rows must be at least 1" in capsys.readouterr().err
    )
