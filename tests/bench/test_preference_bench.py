"""bench/preference.py: the SFT adapter's run, the Train tab's defaults on the file's first rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.preference import SFT_NAME, sft_config
from bench.preference_pairs import bitext_pairs, read_rows
from finetune.config import validate
from ui.views.forms import ui_defaults


def test_the_budget_run_is_the_train_tabs_on_the_first_rows_only(tmp_path, bitext_dir):
    data = bitext_dir / "bitext_v1_train.csv"
    cfg = sft_config(data, 400, 10, 30, tmp_path)
    rows = read_rows(data)[0]
    assert read_rows(Path(cfg.data.path))[0] == rows[:400]  # never the held-out rows at the end
    assert [p["prompt"][0]["content"] for p in bitext_pairs(data, -200, 200)] == [
        r["instruction"] for r in rows[-200:]
    ]
    expected = ui_defaults()  # the Train tab's settings (both come from first_run_defaults)
    expected.data.path, expected.data.max_samples, expected.run.adapter_name = (
        cfg.data.path,
        400,
        SFT_NAME,
    )
    expected.data.with_passages = 0  # without the Train tab's passages, as DPO and CPO train
    assert (
        cfg.to_dict() == expected.to_dict()
        and cfg.train.time_budget_s == 600
        and validate(cfg) == []
    )
    short = sft_config(data, 400, 2.5, 30, tmp_path)
    assert short.train.time_budget_s == 150


def test_budget_zero_is_the_fixed_step_run(tmp_path, bitext_dir):
    cfg = sft_config(bitext_dir / "bitext_v1_train.csv", 64, 0, 7, tmp_path)
    t = cfg.train
    assert (
        t.time_budget_s == 0
        and t.max_steps == 7
        and (t.eval_every, t.probe_every, t.save_every) == (0, 0, 0)
    )
    assert (
        cfg.data.max_samples == 64
        and len(read_rows(Path(cfg.data.path))[0]) == 64
        and validate(cfg) == []
    )


def test_the_start_accuracy_is_cached_under_the_adapters_weights_and_the_pairs(
    tmp_path, monkeypatch
):
    import bench.preference as bench_preference
    from adapters.shelf.manifest import WEIGHTS

    calls = []
    monkeypatch.setattr(
        bench_preference,
        "accuracy",
        lambda name, pairs: calls.append(name) or (0.5 + len(calls) / 10, 1.0, 2.0),
    )
    sft = tmp_path / "adapters" / SFT_NAME
    sft.mkdir(parents=True)
    (sft / WEIGHTS).write_bytes(b"weights one")
    pairs = [{"prompt": "p", "chosen": "c", "rejected": "r"}]
    first = bench_preference.start_accuracy(pairs, sft, tmp_path)
    assert (
        first == (0.6, 1.0, 2.0) and bench_preference.start_accuracy(pairs, sft, tmp_path) == first
    )
    (sft / WEIGHTS).write_bytes(b"weights two")  # a new SFT adapter in the same home
    assert bench_preference.start_accuracy(pairs, sft, tmp_path) == (0.7, 1.0, 2.0)
    assert bench_preference.start_accuracy(pairs[:0], sft, tmp_path) == (
        0.8,
        1.0,
        2.0,
    )  # other pairs
    assert calls == [SFT_NAME] * 3


def test_gate_rows_must_leave_room_for_the_training_rows(bitext_dir):
    from bench.preference_args import check_args, parse_args

    data = bitext_dir / "bitext_v1_train.csv"
    check_args(parse_args(["--sft-rows", "1000", "--pairs", "400", "--gate-from", "600"]), data)
    with pytest.raises(ValueError, match=r"max\(--held-out, --gate-from\) must fit"):
        check_args(
            parse_args(["--sft-rows", "1000", "--pairs", "400", "--gate-from", "2700"]), data
        )


def test_the_preference_runs_time_budget_is_checked_in_minutes(bitext_dir):
    from bench.preference_args import check_args, parse_args

    data = bitext_dir / "bitext_v1_train.csv"
    check_args(parse_args(["--time-budget", "10"]), data)
    with pytest.raises(
        ValueError, match=r"--time-budget must be 0 \(off\) or from 0.5 minutes to 7 days, got 0.1"
    ):
        check_args(parse_args(["--time-budget", "0.1"]), data)
