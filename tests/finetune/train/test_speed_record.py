"""What a new speed measurement does to the kept one: a faster or another machine's replaces it,
a slower one on the same machine (a busy moment) does not; and the batch ``auto`` takes on a CPU
for a time budget from it."""

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
    speed_record.save(cfg, QUIET, "run", 8, "cpu")
    speed_record.save(cfg, BUSY, "dry run", 8, "cpu")
    measured, record = speed_record.load(cfg)
    assert measured == QUIET and record["source"] == "run"
    assert speed_record.budget_problems(cfg) == []  # 300 s at 4 s a step: no refusal
    alone = RunConfig()
    alone.train.time_budget_s, alone.train.batch_size = 300, 4
    speed_record.save(alone, BUSY, "dry run", 4, "cpu")
    assert speed_record.budget_problems(alone)  # the same busy figures alone: refused
    faster = Measured(startup_s=25.0, step_s=3.0, val_batch_s=2.5, val_batches=4)
    speed_record.save(cfg, faster, "dry run", 8, "cpu")
    assert speed_record.load(cfg)[0] == faster


def test_another_machine_or_an_old_record_is_replaced(home, monkeypatch):
    cfg = RunConfig()
    speed_record.save(cfg, QUIET, "run", 8, "cpu")
    other = {**model_costs.machine_info(), "cpu": "Another CPU"}
    monkeypatch.setattr(speed_record, "machine_info", lambda: other)
    speed_record.save(cfg, BUSY, "run", 8, "cpu")
    assert speed_record.load(cfg)[0] == BUSY
    monkeypatch.setattr(speed_record, "machine_info", model_costs.machine_info)  # this one again
    path = home / "speed" / f"{speed_record.settings_key(cfg)}.json"
    old = {"startup_s": 1.0, "step_s": 1.0, "val_batch_s": 1.0, "val_batches": 4}
    path.write_text(json.dumps({**old, "source": "run"}))  # written before machines were noted
    assert speed_record.load(cfg)[0] == Measured(**old)  # still read
    speed_record.save(cfg, BUSY, "run", 8, "cpu")
    measured, record = speed_record.load(cfg)
    assert measured == BUSY and record["machine"] == model_costs.machine_info()
    assert list(json.loads(path.read_text())["by_batch"]) == ["8"]


def test_a_compiled_run_keeps_its_speeds_apart_from_an_eager_one(home):
    eager, compiled = RunConfig(), RunConfig()
    eager.train.time_budget_s = compiled.train.time_budget_s = 300
    compiled.train.compile = "on"
    speed_record.save(compiled, BUSY, "run", 8, "cpu")  # a compiled run's slow first steps
    assert speed_record.load(eager) is None and speed_record.budget_problems(eager) == []
    assert speed_record.load(compiled)[0] == BUSY
    auto = RunConfig()
    auto.train.time_budget_s = 300
    speed_record.save(eager, QUIET, "run", 8, "cpu")
    assert speed_record.load(auto)[0] == QUIET  # "auto" keeps the keys it had before


SLOW_HOUR = Measured(startup_s=60, step_s=17.8, val_batch_s=3.0, val_batches=7)  # 8 rows a step


def _defaults(batch="auto"):
    cfg = RunConfig()
    cfg.train.time_budget_s, cfg.train.batch_size = 600, batch
    return cfg


def test_auto_on_a_cpu_takes_the_batch_whose_steps_the_budget_buys(home):
    speed_record.save(_defaults(), SLOW_HOUR, "run", 8, "cpu")
    # At 8 rows 10 minutes buy 21 steps: refused for a number, not for auto, which takes 5.
    eight = _defaults(8)
    speed_record.save(eight, SLOW_HOUR, "run", 8, "cpu")
    assert speed_record.budget_problems(eight)[0].startswith(
        "A 10-minute budget buys about 21 steps here"
    )
    assert speed_record.budget_problems(_defaults()) == []
    batch, line = speed_record.auto_batch(_defaults())
    assert batch == 5 and line.startswith(
        "batch size auto: 5 rows per micro-batch on the CPU (the 10-minute budget buys about 35 "
        "steps of 5, 21 of 8: 30 are the fewest a useful run takes, at the speeds a training "
        "run of these settings measured at "
    )
    text = speed_record.budget_text(_defaults())
    assert text.startswith("A 10-minute budget buys about 35 steps here: ") and text.endswith(
        " Batch size auto takes 5 rows per micro-batch for it: at 8 the budget would buy fewer "
        "than 30 steps."
    )
    longer = _defaults()
    longer.train.time_budget_s = 1200
    speed_record.save(longer, SLOW_HOUR, "run", 8, "cpu")
    assert speed_record.auto_batch(longer)[0] == 8
    assert "Batch size auto takes" not in speed_record.budget_text(longer)
    # Too short even at 4 rows: refused at 4, with the minutes a useful run needs there.
    short = _defaults()
    short.train.time_budget_s = 240
    speed_record.save(short, SLOW_HOUR, "run", 8, "cpu")
    assert speed_record.auto_batch(short)[0] == 4
    (problem,) = speed_record.budget_problems(short)
    assert "then 8.9 s a step. A useful run needs at least 30 steps: give it at least " in problem
    assert problem.endswith(
        "a new dry run measures again). Batch size auto takes 4 rows per micro-batch for it: at "
        "8 the budget would buy fewer than 30 steps."
    )


def test_each_batch_keeps_its_own_speeds_and_auto_judges_from_the_nearest(home):
    cfg = _defaults()
    speed_record.save(cfg, SLOW_HOUR, "run", 8, "cpu")  # 2.2 s a row
    # The run auto then took, at 5 rows: a little faster a row (shorter padding), kept beside.
    at_five = Measured(startup_s=60, step_s=10.0, val_batch_s=2.0, val_batches=12)
    speed_record.save(cfg, at_five, "run", 5, "cpu")
    path = home / "speed" / f"{speed_record.settings_key(cfg)}.json"
    assert sorted(json.loads(path.read_text())["by_batch"]) == ["5", "8"]
    assert speed_record.load(cfg)[0] == at_five  # the newest
    # 8 and 7 are judged from 8 (21 and 25 steps), 6 from 5's speeds: 12 s a step, 32 steps.
    batch, line = speed_record.auto_batch(cfg)
    assert batch == 6 and "buys about 32 steps of 6, 21 of 8:" in line
    # A busier moment at 5 does not replace it; a quieter one at 8 replaces only 8's.
    speed_record.save(cfg, Measured(60, 14.0, 2.0, 12), "run", 5, "cpu")
    quiet_eight = Measured(startup_s=60, step_s=12.0, val_batch_s=3.0, val_batches=7)
    speed_record.save(cfg, quiet_eight, "run", 8, "cpu")
    by_batch = json.loads(path.read_text())["by_batch"]
    assert by_batch["5"]["step_s"] == 10.0 and by_batch["8"]["step_s"] == 12.0
    assert speed_record.auto_batch(cfg)[0] == 8  # 10 minutes buy 30 steps of 8 now


def test_a_gpu_record_or_one_without_its_batch_leaves_auto_to_the_trials(home):
    cfg = _defaults()
    speed_record.save(cfg, SLOW_HOUR, "run", 64, "cuda:0")  # the GPU's trials choose there
    assert speed_record.auto_batch(cfg) is None
    assert speed_record.budget_problems(cfg)  # judged at the speeds measured, as they are
    path = home / "speed" / f"{speed_record.settings_key(cfg)}.json"
    old = {"startup_s": 1.0, "step_s": 1.0, "val_batch_s": 1.0, "val_batches": 4}
    path.write_text(json.dumps({**old, "source": "run", "machine": model_costs.machine_info()}))
    assert speed_record.auto_batch(cfg) is None  # written before records noted their batch
    speed_record.save(cfg, SLOW_HOUR, "run", 8, "cpu")
    assert speed_record.auto_batch(cfg)[0] == 5
    speed_record.save(cfg, QUIET, "run", 16, "cuda:0")  # the same settings trained on a GPU
    assert speed_record.auto_batch(cfg) is None and speed_record.load(cfg)[1]["batch"] == 16
    assert list(json.loads(path.read_text())["by_batch"]) == ["16"]  # the CPU's are dropped
