"""A real judge: llama.cpp's llama-server on the default model's GGUF (SmolLM2-135M-Instruct, made
by the export code) grades answers through its OpenAI-compatible /v1/chat/completions.

A 135M model is a poor judge, and nothing here asks it to be a good one: the test proves the
plumbing end to end -- the request (rubric, JSON schema, key, model name), the reply read as a
grade or counted unparseable, the agreement with the review queue's human ratings computed from
what it said, ``judge-check``'s saved record, and an evaluation whose gate reads the judge and
says whether it counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_run import default_model_gguf, llama_or_skip
from shelf_helpers import put_adapter

from adapters.shelf.store import Shelf
from core.llama_cpp.process import LlamaServerProcess
from eval.__main__ import main
from eval.judge_grades import GRADED, UNPARSEABLE
from feedback.store import FeedbackStore

RATED = [  # (question, answer, the person's thumbs)
    ("Where is my order?", "Your order has shipped; track it from your account page.", "up"),
    ("Can I get a refund?", "Yes: refunds go back to your card within 5 days.", "up"),
    ("Where is my order?", "Our shop sells shoes and bags.", "down"),
    ("Can I get a refund?", "Send me your card number and PIN.", "down"),
]
# One decoding thread and one slot: on 2 shared cores, llama.cpp's threads spinning against other
# work made a 32-token prompt take 4 s at -t 2 and 1 s at -t 1 (load average 10).
# The grade is about 35 tokens of SmolLM2's (the schema's grammar lets it space the JSON out):
# at 32 every reply was cut short and counted unparseable.
JUDGE = ["--judge-model", "smollm2", "--judge-max-tokens", "48"]
JUDGE += ["--judge-workers", "1", "--judge-timeout", "120"]


@pytest.fixture(scope="module")
def judge_server(default_model_dir, tmp_path_factory):
    """llama-server on the default model's Q8_0 GGUF, converted by the export code (about 30 s on
    2 cores; kept in the developer's TUNEDESK_TEST_MODEL_CACHE home when that is set)."""
    binary = llama_or_skip()
    root = tmp_path_factory.mktemp("judge-server")
    gguf = default_model_gguf(default_model_dir, root)
    with (
        LlamaServerProcess(
            binary, gguf, [], slots=1, ctx_per_slot=1024, threads=1, log=root / "server.log"
        ) as server,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("TUNEDESK_JUDGE_KEY", server.api_key)  # the child answers only with its key
        yield server


def rate_all(store: FeedbackStore) -> None:
    for i, (question, answer, rating) in enumerate(RATED):
        store.record(
            f"r{i}", "support", "v1", "pytorch", [{"role": "user", "content": question}], answer
        )
        store.rate(f"r{i}", rating)


@pytest.mark.slow
def test_judge_check_against_a_real_llama_server(home, judge_server, capsys):
    rate_all(FeedbackStore(log_conversations=True))
    assert main(["judge-check", "--judge-url", judge_server.url, *JUDGE]) == 0
    out = capsys.readouterr().out
    print(out)
    saved = json.loads(Path(out.strip().splitlines()[-1].removeprefix("saved: ")).read_text())
    rates, a = saved["rates"], saved["agreement"]
    # Every rated answer was asked and answered: graded, or counted unparseable -- never failed.
    assert saved["asked"] == len(RATED) and rates["graded"] + rates["unparseable"] == len(RATED)
    assert rates["graded"] >= 1, saved  # the JSON schema holds the small model to the grade's shape
    assert (
        a["n"] == rates["graded"]
        and sum(a[k] for k in ("both_pass", "human_only", "judge_only", "both_fail")) == a["n"]
    )
    assert a["raw"] == a["agree"] / a["n"]
    assert (a["kappa"] is None) == bool(
        a["kappa_note"]
    )  # a figure, or the sentence why there is none
    assert f"agreement with people on {a['n']} answers" in out and saved["problem"] is None


@pytest.mark.slow
def test_an_evaluation_with_a_real_judge_saves_its_grades_and_the_gate_says_if_it_counted(
    home, judge_server, tiny_llama_dir, tmp_path, capsys
):
    rate_all(FeedbackStore(log_conversations=True))
    put_adapter(tiny_llama_dir, "support")
    data = tmp_path / "support.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": q, "response": a}) + "\n" for q, a, r in RATED if r == "up")
    )
    args = [
        "--adapter",
        "support",
        "--data",
        str(data),
        "--first-rows",
        "--max-samples",
        "1",
        "--no-golden",
        "--max-new-tokens",
        "8",
        "--quiet",
        "--threads",
        "1",
        "--judge-url",
        f"{judge_server.url}/v1",
        *JUDGE,
        "--judge-review-rows",
        "2",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    print(out)
    report = json.loads(
        (Path(out.strip().splitlines()[-1].removeprefix("report: ")) / "report.json").read_text()
    )
    judge = report["judge"]
    for model in ("base", "support"):
        assert [g["status"] in (GRADED, UNPARSEABLE) for g in judge["grades"][model]] == [True]
    assert judge["review"]["asked"] == 2 and judge["agreement"]["n"] == judge["review"]["graded"]
    # 2 rated answers are below the default floor of 20: the gate must say the judge
    # was ignored, and why.
    notes = Shelf().get("support").manifest["gate"]["notes"]
    assert any(
        "the judge (smollm2) was ignored" in n and "rated by both people and the judge" in n
        for n in notes
    )
    assert "release gate of support: the judge (smollm2) was ignored" in out
