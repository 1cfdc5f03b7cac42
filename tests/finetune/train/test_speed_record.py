"""What a new speed measurement does to the kept one: a faster or another machine's replaces it,
a slower one on the same machine (a busy moment) does not."""

from __future__ import annotations

import json

from core import model_costs
from finetune.config import RunConfig
from finetune.train import speed_record
from finetune.train.budget_plan import Measured

QUIET = Measured(startup_s=20.0, step_s=4.0, val_batch_s=2.0, val_batches=4)
BUSY = Measured(startup_s=90.0, step_s=60.0, val_batch_s=20.0, val_batches=4)


def test_a_busy_moment_never_overwrites_a_quiet_measurement(home):
    cfg = RunConfig()
    cfg.train.time_budget_s = 300
    speed_record.save(cfg, QUIET, "run")
    speed_record.save(cfg, BUSY, "dry run")
    measured, record = speed_record.load(cfg)
    assert measured == QUIET and record["source"] == "run"
    assert speed_record.budget_problems(cfg) == []  # 300 s at 4 s a step: no refusal
    alone = RunConfig()
    alone.train.time_budget_s, alone.train.batch_size = 300, 4
    speed_record.save(alone, BUSY, "dry run")
    assert speed_record.budget_problems(alone)  # the same busy figures alone: refused
    faster = Measured(startup_s=25.0, step_s=3.0, val_batch_s=2.5, val_batches=4)
    speed_record.save(cfg, faster, "dry run")
    assert speed_record.load(cfg)[0] == faster


def test_another_machine_or_an_old_record_is_replaced(home, monkeypatch):
    cfg = RunConfig()
    speed_record.save(cfg, QUIET, "run")
    other = {**model_costs.machine_info(), "cpu": "Another CPU"}
    monkeypatch.setattr(speed_record, "machine_info", lambda: other)
    speed_record.save(cfg, BUSY, "run")
    assert speed_record.load(cfg)[0] == BUSY
    monkeypatch.undo()
    path = home / "speed" / f"{speed_record.settings_key(cfg)}.json"
    old = json.loads(path.read_text())
    del old["machine"]  # written before machines were noted
    old["step_s"] = 1.0
    path.write_text(json.dumps(old))
    speed_record.save(cfg, BUSY, "run")
    measured, record = speed_record.load(cfg)
    assert measured == BUSY and record["machine"] == model_costs.machine_info()


def test_a_compiled_run_keeps_its_speeds_apart_from_an_eager_one(home):
    eager, compiled = RunConfig(), RunConfig()
    eager.train.time_budget_s = compiled.train.time_budget_s = 300
    compiled.train.compile = "on"
    speed_record.save(compiled, BUSY, "run")  # a compiled run's slow first steps
    assert speed_record.load(eager) is None and speed_record.budget_problems(eager) == []
    assert speed_record.load(compiled)[0] == BUSY
    auto = RunConfig()
    auto.train.time_budget_s = 300
    speed_record.save(eager, QUIET, "run")
    assert speed_record.load(auto)[0] == QUIET  # "auto" keeps the keys it had before
