"""Per-intent evaluation on the real Bitext file: all 27 intents, each with its CIs.

Affordable on 2 cores: the tiny llama model built from a config, a random LoRA adapter,
5 rows per intent (the fewest that get a CI) and 2 new tokens per answer. The rows are read
from ../shared/datasets/bitext/ and never copied into the repository.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from eval.__main__ import main
from eval.run import evaluate
from eval.slices import MIN_CI_ROWS
from inference.generate import GenerationSettings
from inference.session import ModelSession


@pytest.fixture
def bitext_csv(bitext_dir) -> Path:
    path = bitext_dir / "bitext_v1_train.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture
def shelf_adapter(home, random_lora_dir):
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    return "tuned"


def test_per_intent_report_lists_all_27_intents_with_cis(bitext_csv, shelf_adapter, tiny_llama_dir):
    import torch

    torch.set_num_threads(1)
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    report = evaluate(
        session,
        [shelf_adapter],
        str(bitext_csv),
        max_samples=1000,
        batch_size=16,
        settings=GenerationSettings(max_new_tokens=2),
        use_validation_split=False,
        golden="assets/golden.jsonl",
        slice_by="intent",
        rows_per_slice=MIN_CI_ROWS,
    )
    slices = report.slices["slices"]
    assert report.slices["column"] == "intent" and len(slices) == 27
    assert report.data["rows"] == 27 * MIN_CI_ROWS
    for s in slices:
        assert s["rows"] == MIN_CI_ROWS and s["note"] == ""
        for metric in ("bleu", "rouge_l", "perplexity"):
            d = s["deltas"][shelf_adapter][metric]
            assert d["low"] is not None and d["low"] <= d["high"]
    # Every golden prompt is counted in its intent's slice.
    assert sum(s["golden_total"] for s in slices) == report.golden["total"] == 30
    with open(Path(report.folder) / "slices.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["slice"] for r in rows) == sorted(s["slice"] for s in slices)
    assert all(r["low_rouge_l"] and r["high_rouge_l"] for r in rows)
    # The verdict is recorded with the adapter, with the evaluation that gave it.
    manifest = json.loads(
        (home_of(report) / "adapters" / shelf_adapter / "manifest.json").read_text()
    )
    assert manifest["gate"]["eval_id"] == report.eval_id
    assert manifest["gate"]["state"] == report.gate[shelf_adapter]["state"]
    assert manifest["gate"]["slice_by"] == "intent"


def home_of(report) -> Path:
    return Path(report.folder).parents[1]


@pytest.mark.parametrize("case", ["no such column", "rows per slice without a column"])
def test_cli_bad_slice_input_is_one_error_line(bitext_csv, shelf_adapter, capsys, case):
    argv = ["--adapter", shelf_adapter, "--data", str(bitext_csv), "--quiet"]
    argv += ["--slice-by", "topic"] if case == "no such column" else ["--rows-per-slice", "3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert (
        "slice column 'topic' is not in bitext_v1_train.csv (its columns: context"
        if case == "no such column"
        else "--rows-per-slice needs --slice-by"
    ) in err
