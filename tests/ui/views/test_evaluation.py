"""The Evaluate tab's slice choice: the default column is used where the data has it."""

from __future__ import annotations

import json

from ui.views.evaluation import NO_SLICE, slice_column


def test_default_intent_slices_where_the_data_has_it_and_says_so_where_not(tmp_path):
    with_intent = tmp_path / "with.jsonl"
    with_intent.write_text(json.dumps({"prompt": "a", "response": "b", "intent": "refund"}) + "\n")
    without = tmp_path / "without.jsonl"
    without.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    assert slice_column("intent", str(with_intent)) == ("intent", "")
    assert slice_column("intent", str(without)) == (
        None,
        "Not sliced: the data has no `intent` column.",
    )
    assert slice_column(NO_SLICE, str(with_intent)) == (None, "")
    # a column the user typed is passed on: evaluate() refuses it naming the file's columns
    assert slice_column("topic", str(without)) == ("topic", "")
    # an unreadable file is left to evaluate(), which says what is wrong with it
    assert slice_column("intent", str(tmp_path / "missing.jsonl")) == ("intent", "")


def test_gate_verdicts_are_separate_paragraphs_and_name_the_parent():
    from types import SimpleNamespace

    from ui.views.evaluation import gate_markdown

    report = SimpleNamespace(
        slices={},
        adapters=["v1", "v2"],
        gate={
            "v1": {"state": "passed", "reasons": [], "notes": ["a note"], "against": "base"},
            "v2": {
                "state": "failed",
                "reasons": ["perplexity is worse than v1"],
                "notes": [],
                "against": "v1",
            },
        },
    )
    text = gate_markdown(report)
    assert (
        "- _a note_\n\n❌ **Release gate of v2 against v1, the version it was tuned from: failed**"
        in text
    )
    assert text.startswith("✅ **Release gate of v1: passed**")


def test_the_run_summary_names_the_engine_that_answered_and_why():
    from types import SimpleNamespace

    from ui.views.evaluation import run_summary

    def report(engine):
        return SimpleNamespace(
            data={"rows": 24, "selection": "held out"},
            folder="/x",
            timings={"total_seconds": 9.5, "rows_per_second": 2.5},
            settings={"engine": engine} if engine else {},
        )

    fell_back = {
        "name": "pytorch",
        "label": "pytorch float32",
        "note": "PyTorch answered: llama.cpp could not (llama-server is not built)",
    }
    text = run_summary(report(fell_back))
    assert (
        "answered by pytorch float32 (PyTorch answered: llama.cpp could not (llama-server is not "
        "built)); perplexity by PyTorch"
    ) in text
    served = {"name": "llama.cpp", "label": "llama.cpp q8_0", "note": ""}
    assert "answered by llama.cpp q8_0; perplexity by PyTorch." in run_summary(report(served))
    assert "answered by pytorch; perplexity" in run_summary(report(None))  # a report from before
