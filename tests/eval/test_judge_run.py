"""The judge inside an evaluation: grades per model, agreement from the review queue, and an
evaluation that finishes and saves everything when the judge is unreachable or talks nonsense."""

from __future__ import annotations

import json

import pytest
from judge_helpers import FakeJudge, closed_port_url, grades_by_word, prose
from shelf_helpers import put_adapter

from adapters.shelf.store import Shelf
from eval.__main__ import main
from eval.judge import config_from
from eval.judge_run import judge_report
from feedback.store import FeedbackStore

SAMPLES = [
    {
        "prompt": "Where is order 55123?",
        "reference": "It ships today.",
        "answers": {"base": "hello hello", "tuned": "Order 55123 ships today."},
    },
    {
        "prompt": "Cancel my order",
        "reference": "Cancelled.",
        "answers": {"base": "hello", "tuned": "It ships anyway."},
    },
]


def rate(store: FeedbackStore, answer_id: str, question: str, answer: str, rating: str) -> None:
    store.record(
        answer_id, "tuned", "v1", "pytorch", [{"role": "user", "content": question}], answer
    )
    store.rate(answer_id, rating)


def test_every_models_answers_are_graded_and_matched_to_the_queues_ratings(home):
    store = FeedbackStore(log_conversations=True)
    rate(
        store, "e1", "Where is order 55123?", "Order 55123 ships today.", "up"
    )  # the evaluation's answer
    rate(store, "e2", "Cancel my order", "hello", "down")  # base's answer
    rate(
        store, "q1", "Refund please", "It ships on Monday.", "down"
    )  # queue only: the judge disagrees
    rate(store, "q2", "Hi", "Hello, how can I help?", "down")  # queue only: both say no
    with FakeJudge(grades_by_word("ships")) as judge:
        out = judge_report(
            SAMPLES, ["base", "tuned"], config_from(judge.url, "m", review_rows=10), store.ratings()
        )
        asked = [r["messages"][-1]["content"] for r in judge.requests]
    assert [g["passed"] for g in out["grades"]["tuned"]] == [True, True]
    assert [g["passed"] for g in out["grades"]["base"]] == [False, False]
    assert out["rates"]["tuned"]["addresses_rate"] == 1.0 and out["rates"]["base"]["graded"] == 2
    a = out["agreement"]
    assert (a["n"], a["agree"], a["judge_only"], a["both_pass"], a["both_fail"]) == (4, 3, 1, 1, 2)
    assert out["review"] == {
        "asked": 2,
        "graded": 2,
        "matched_in_eval": 2,
        "ratings": {"used": 4},
    }  # the matched two were not graded twice
    assert len(asked) == 6 and sum("Reference answer: none" in m for m in asked) == 2
    assert out["problem"] is None and "key" not in json.dumps(out["judge"])


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "support.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": f"where is my order {i}?", "response": f"Order {i} ships soon."})
            + "\n"
            for i in range(3)
        )
    )
    return path


def run_cli(data, url: str, *extra) -> int:
    return main(
        [
            "--adapter",
            "support",
            "--data",
            str(data),
            "--first-rows",
            "--max-samples",
            "3",
            "--no-golden",
            "--max-new-tokens",
            "4",
            "--batch-size",
            "3",
            "--quiet",
            "--threads",
            "1",
            "--judge-url",
            url,
            "--judge-model",
            "judge",
            "--judge-retries",
            "0",
            "--judge-timeout",
            "5",
            *extra,
        ]
    )


def unlabelled_gate(name: str) -> None:
    """The quality floors switched off, as a team evaluating unlabelled rows does
    (``python -m adapters gate NAME --set floors...=none``): the data has no intent column."""
    from adapters.__main__ import main as adapters_main

    floors = ("right_intent_min", "intent_min", "handoff_min")
    assert adapters_main(["gate", name, *[f"--set=floors.{f}=none" for f in floors]]) == 0


def saved_report(capsys) -> tuple[str, dict]:
    out = capsys.readouterr().out
    folder = out.strip().splitlines()[-1].removeprefix("report: ")
    return out, json.loads((__import__("pathlib").Path(folder) / "report.json").read_text())


def test_an_unreachable_judge_is_one_sentence_and_the_evaluation_is_saved(
    home, tiny_llama_dir, data, capsys
):
    put_adapter(tiny_llama_dir, "support")
    unlabelled_gate("support")
    url = closed_port_url()
    assert run_cli(data, url) == 0
    out, report = saved_report(capsys)
    assert (
        "| support |" in out and "release gate of support: passed" in out
    )  # scored and gated as ever
    sentence = f"the judge at {url}/v1 (model 'judge') could not be reached"
    assert f"  problem: {sentence}" in out and "everything else was evaluated and saved" in out
    assert f"release gate of support: the judge (judge) was ignored: {sentence}" in out
    assert (
        report["judge"]["rates"]["support"]["not_asked"] == 3
        and report["metrics"]["support"]["bleu"] >= 0
    )
    gate = Shelf().get("support").manifest["gate"]
    assert gate["state"] == "passed" and any(
        n.startswith("the judge (judge) was ignored") for n in gate["notes"]
    )


def test_a_judge_answering_garbage_is_counted_unparseable_and_ignored(
    home, tiny_llama_dir, data, capsys
):
    put_adapter(tiny_llama_dir, "support")
    unlabelled_gate("support")
    with FakeJudge(prose) as judge:
        assert run_cli(data, judge.url, "--judge-review-rows", "0") == 0
    out, report = saved_report(capsys)
    assert report["judge"]["rates"]["support"]["unparseable"] == 3
    assert "none of its 6 replies was the JSON grade it was asked for" in report["judge"]["problem"]
    assert "I think this answer" in report["judge"]["problem"]
    assert "release gate of support: passed" in out and "was ignored" in out


def test_half_a_judge_is_refused_before_the_model_loads(home, data, capsys):
    code = main(
        ["--base", "nowhere/none", "--data", str(data), "--judge-url", "http://127.0.0.1:1"]
    )
    assert (
        code == 2 and "a judge needs both --judge-url and --judge-model" in capsys.readouterr().err
    )
    code = main(
        [
            "--base",
            "nowhere/none",
            "--data",
            str(data),
            "--judge-url",
            "localhost:1",
            "--judge-model",
            "m",
        ]
    )
    assert code == 2 and "judge URL must be http(s)://host" in capsys.readouterr().err
