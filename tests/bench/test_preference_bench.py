"""bench/preference.py: the SFT adapter's run, the Train tab's defaults on the file's first rows."""

from __future__ import annotations

from pathlib import Path

from bench.preference import SFT_NAME, sft_config
from bench.preference_pairs import bitext_pairs, read_rows
from finetune.config import validate
from ui.views.forms import ui_defaults


def test_the_budget_run_is_the_train_tabs_on_the_first_rows_only(tmp_path, bitext_dir):
    data = bitext_dir / "bitext_v1_train.csv"
    cfg = sft_config(data, 400, 10, 30, tmp_path)
    rows = read_rows(data)[0]
    assert read_rows(Path(cfg.data.path))[0] == rows[:400]  # never the held-out rows at the end
    assert [p["prompt"][0]["content"] for p in bitext_pairs(data, -200, 200)] == [r["instruction"] for r in rows[-200:]]
    expected = ui_defaults()  # the Train tab's settings (both come from first_run_defaults)
    expected.data.path, expected.data.max_samples, expected.run.adapter_name = cfg.data.path, 400, SFT_NAME
    assert cfg.to_dict() == expected.to_dict() and cfg.train.time_budget_s == 600 and validate(cfg) == []
    short = sft_config(data, 400, 2.5, 30, tmp_path)
    assert short.train.time_budget_s == 150


def test_budget_zero_is_the_fixed_step_run(tmp_path, bitext_dir):
    cfg = sft_config(bitext_dir / "bitext_v1_train.csv", 64, 0, 7, tmp_path)
    t = cfg.train
    assert t.time_budget_s == 0 and t.max_steps == 7 and (t.eval_every, t.probe_every, t.save_every) == (0, 0, 0)
    assert cfg.data.max_samples == 64 and len(read_rows(Path(cfg.data.path))[0]) == 64 and validate(cfg) == []
