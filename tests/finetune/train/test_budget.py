"""Training for a time budget (finetune/train/budget.py) on the tiny llama model: the run ends
on time, its schedule ends with it, and the manifest says what the seconds bought."""

import json
import time

import pytest
from run_helpers import tiny_run_config

from finetune import config
from finetune.train import train
from finetune.train.budget import Cadence


@pytest.fixture
def short_budgets(monkeypatch):
    """Budgets of a few seconds (the settings allow 30 s and up) so the tests stay fast; the
    torch threads the runs set (one) are put back after."""
    import torch

    monkeypatch.setattr(config, "BUDGET_RANGE_S", (1, 7 * 24 * 3600))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _timeline(events: list, t0: float) -> str:
    """When each event came, for an assertion's message (a late run says where time went)."""
    return "; ".join(
        f"{e['time'] - t0:.2f} {e['type']} {e.get('step', '')}/{e.get('total_steps', '')}"
        for e in events
        if e["type"] != "status"
    )


def _stalled(events: list) -> float:
    """Seconds the run could not have foreseen: each wait between two events beyond ten times the
    usual one (a checkpoint's write held up 1.8 s by a busy disk was seen on CI). The planner
    times steps as they come; a stall after its last decision can only make the run late."""
    times = [e["time"] for e in events if e["type"] != "status"]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    if not gaps:
        return 0.0
    usual = gaps[len(gaps) // 2]
    return sum(g - 10 * usual for g in gaps if g > 10 * usual)


def _budget_cfg(model_dir, seconds: float, **train):
    # One thread: the tiny model gains nothing from two, and on cores another job keeps busy two
    # threads wait on each other (a forward 50x slower was seen): the timings must be the run's own.
    settings = {
        "max_steps": 5,
        "learning_rate": 5e-3,
        "log_every": 1,
        "eval_every": None,
        "probe_every": None,
        "save_every": None,
        "cpu_threads": 1,
        **train,
    }
    return tiny_run_config(model_dir, time_budget_s=seconds, **settings)


def test_a_budget_run_ends_on_time_with_its_schedule_and_says_what_it_bought(
    tiny_llama_dir, home, short_budgets
):
    # 10 s: start-up alone took 5 s of it beside two busy processes, and the steps must still
    # run past an epoch in what is left.
    budget, events = 10.0, []
    t = time.time()
    result = train(_budget_cfg(tiny_llama_dir, budget), on_event=events.append)
    took = time.time() - t
    late = _stalled(events)  # a stall after the planner's last look can only make it late
    assert took > budget - 2 and took - late < budget + 0.3, _timeline(
        events, t
    )  # most of it, not more
    progress = [e for e in events if e["type"] == "progress"]
    done = events[-1]
    assert (
        done["type"] == "done" and done["status"] == "done" and done["total_steps"] == result.steps
    )
    # The data does not cap the plan (43 rows, 11 steps an epoch): max_steps=5 is overridden too.
    assert result.steps > 11, _timeline(events, t)
    assert progress[-1]["step"] == progress[-1]["total_steps"] == result.steps
    assert progress[-1]["lr"] == pytest.approx(0.0, abs=1e-9)  # the cosine decay reached its end
    assert max(e["lr"] for e in progress) == pytest.approx(5e-3, rel=0.05)  # after warming up
    evals = [e["step"] for e in events if e["type"] == "eval"]
    # The base, about 3 at quarters of the plan (it moves while the speed is measured), the last.
    assert (
        evals[0] == 0
        and evals[-1] == result.steps
        and len(evals) in (4, 5)
        and evals == sorted(set(evals))
    )
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    b = manifest["budget"]
    assert b["seconds"] == budget and b["steps"] == manifest["steps"] == result.steps
    # 43 training rows in batches of 4: each epoch is 10 batches of 4 and one of 3.
    steps, epochs = result.steps, result.steps // 11
    assert 4 * steps - epochs - 1 <= b["rows_seen"] <= 4 * steps - epochs
    assert (
        b["epochs"] == pytest.approx(steps / 11)
        and b["epochs"] > 1
        and b["tokens_seen"] > b["rows_seen"] * 10
    )
    assert (
        b["seconds_used"] - late <= budget + 0.3 and manifest["training"]["time_budget_s"] == budget
    )
    assert "Time budget: " in (result.adapter_dir / "README.md").read_text()


def test_stop_during_a_budget_run_saves_and_resume_spends_what_is_left(
    tiny_llama_dir, home, short_budgets
):
    budget = 10.0  # the stop comes at step 4 (~1 s alone, 4 s beside a build): the rest resumes
    cfg = _budget_cfg(tiny_llama_dir, budget, save_every=2)
    cfg.run.run_dir, cfg.run.adapter_name = str(home / "runs" / "b1"), "budget-stopped"
    seen = []

    def stop() -> bool:
        return sum(e["type"] == "checkpoint" for e in seen) >= 2

    result = train(cfg, on_event=seen.append, stop=stop)
    assert result.status == "stopped" and result.steps == 4
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and manifest["budget"]["steps"] == 4
    assert manifest["budget"]["seconds_used"] < budget / 2  # stopped well before the budget ends
    progress = json.loads(
        (home / "runs" / "b1" / "checkpoints" / "step-0000004" / "progress.json").read_text()
    )
    assert 0 < progress["budget_spent_s"] < budget / 2 and progress["tokens_seen"] > 0

    cfg.run.resume, cfg.run.adapter_name = True, "budget-resumed"
    events = []
    t = time.time()
    resumed = train(cfg, on_event=events.append)
    assert next(e for e in events if e["type"] == "start")["start_step"] == 4
    assert resumed.status == "done" and resumed.steps > 4
    took = time.time() - t
    late = _stalled(events)
    # Only what was left: the resumed session ends at the first session's deadline.
    assert took - late < budget - progress["budget_spent_s"] + 0.3, _timeline(events, t)
    bought = json.loads((resumed.adapter_dir / "manifest.json").read_text())["budget"]
    # The seconds used count both sessions: the first one's, then this one's own.
    assert bought["seconds_used"] == pytest.approx(progress["budget_spent_s"] + took, abs=0.3)
    assert (
        bought["seconds_used"] - late <= budget + 0.3
        and bought["tokens_seen"] > progress["tokens_seen"]
    )


def _fired(every, totals: list[int]) -> list[int]:
    """The steps a Cadence runs after when the plan is totals[s - 1] at step s."""
    cadence = Cadence(every)
    return [s for s, total in enumerate(totals, 1) if s < total and cadence.due(s, total)]


def test_auto_extras_fall_at_quarters_of_the_plan_and_a_growing_plan_repeats_none():
    assert _fired(None, [40] * 40) == [10, 20, 30]
    assert (
        _fired(None, [8] * 8) == [2, 4, 6] and _fired(None, [7] * 7) == []
    )  # short plans: at the end only
    assert _fired(4, [12] * 12) == [4, 8] and _fired(0, [12] * 12) == []
    # The plan grows from 40 to 60 steps after step 10: the first quarter is not run again at 15.
    assert _fired(None, [40] * 10 + [60] * 50) == [10, 30, 45]
    for every in (None, 0, 3, 7):  # count() predicts what due() will do
        for total in (1, 2, 5, 8, 9, 40, 41):
            for step in range(total):
                predicted = Cadence(every).count(step, total)
                later = Cadence(every)
                later.due(step, total) if step else None  # the state at `step`
                assert predicted == sum(later.due(s, total) for s in range(step + 1, total)), (
                    every,
                    step,
                    total,
                )


def test_budget_settings_are_checked_in_words():
    cfg = config.RunConfig()
    for bad in (10, -1, 8 * 24 * 3600, "10m", True, float("nan")):
        cfg.train.time_budget_s = bad
        assert any(
            p.startswith("time budget must be 0 (off) or between 30 seconds and 7 days")
            for p in config.validate(cfg)
        ), bad
    cfg.train.time_budget_s, cfg.train.epochs = 600, 0  # the budget, not the epochs, sizes the run
    assert config.validate(cfg) == []
    cfg.train.method, cfg.train.from_adapter = "dpo", "support"
    assert config.validate(cfg) == [
        "set epochs above 0 or max steps above 0: dpo trains for them (a time budget "
        "can only end it sooner)"
    ]
    cfg.train.epochs = 1.5
    assert config.validate(cfg) == []  # a preference run trains its epochs or until the budget ends
    cfg.train.time_budget_s, cfg.train.epochs = 0, 1
    assert config.validate(cfg) == []


def test_a_budget_validates_on_the_rows_it_affords_and_a_short_run_says_so(
    tiny_llama_dir, home, short_budgets, monkeypatch
):
    from finetune.train import budget_plan, speed_record

    monkeypatch.setattr(
        budget_plan, "VALIDATION_PASS_SHARE", 1e-9
    )  # a pass affords fewer batches than there are
    monkeypatch.setattr(
        budget_plan, "MIN_USEFUL_STEPS", 100_000
    )  # no run here buys a useful number
    cfg = _budget_cfg(tiny_llama_dir, 3.0)
    cfg.data.val_fraction = 0.5  # 24 held-out rows: 6 batches of 4
    events = []
    result = train(cfg, on_event=events.append)
    # The first batch alone took more than a pass affords: the pass is that batch, every time.
    assert (
        "validating on 4 of 24 held-out rows: a pass of all of them would take more than 3% of "
        "the time budget" in [e["message"] for e in events if e["type"] == "status"]
    )
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    b = manifest["budget"]
    assert b["val_batches"] == 1 and manifest["data"]["val_rows"] == 24
    # Where the seconds went, and a result that says the run is too short, in the manifest, the
    # last events and the result, not a silent "done".
    assert b["startup_s"] > 0 and b["validation_s"] > 0 and b["train_s"] > 0
    assert b["startup_s"] + b["validation_s"] + b["train_s"] <= b["seconds_used"] + 0.2
    steps = f"{result.steps} step{'' if result.steps == 1 else 's'}"
    assert result.note == b["note"] and result.note.startswith(
        f"the 0.05-minute budget bought only {steps}, fewer than the 100000 a useful run needs "
        "(start-up "
    )
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert warnings[-1] == result.note and events[-1]["note"] == result.note
    assert (
        f"(**too short to be useful**: {result.note})"
        in (result.adapter_dir / "README.md").read_text()
    )
    # What it measured is kept: the next check of these settings estimates from it.
    measured, record = speed_record.load(cfg)
    assert record["source"] == "run" and measured.val_batches == 6 and 0 < measured.step_s < 1


def test_the_cli_ends_a_short_budget_run_with_a_sentence_and_then_refuses_it(
    tiny_llama_dir, home, short_budgets, monkeypatch, capsys
):
    from finetune.__main__ import main
    from finetune.commands import train as train_command
    from finetune.train import budget_plan

    monkeypatch.setattr(budget_plan, "MIN_USEFUL_STEPS", 100_000)
    monkeypatch.setattr(
        train_command, "process_start", lambda: time.time() - 1.0
    )  # a second of it gone
    argv = [
        "train",
        "--model",
        str(tiny_llama_dir),
        "--data",
        "assets/demo_support.jsonl",
        "--max-samples",
        "48",
        "--max-length",
        "96",
        "--batch-size",
        "4",
        "--lora-r",
        "4",
        "--time-budget",
        "3s",
        "--quiet",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("done, but the 0.05-minute budget bought only ")
    # The run kept its speeds: the same settings are now refused before anything loads.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: the training settings cannot run here:" in err
    assert (
        "- A 0.05-minute budget buys about " in err
        and "A useful run needs at least 100000 steps" in err
    )
    assert "measured by a training run of these settings at " in err


def test_a_plan_sized_below_a_useful_run_is_said_with_where_the_time_went():
    from finetune.train.budget import Costs, Pacer
    from finetune.train.budget_run import plan_warning

    now = time.time()
    cadence = {kind: Cadence(None) for kind in ("validation", "probes", "checkpoint")}
    pacer = Pacer(
        300, now - 100, cadence=cadence, costs=Costs(2, 1, adapter_bytes=0, probe_cap=6.0)
    )
    pacer.steps_began, pacer.base_validation_s, pacer.totals["validation"] = now, 20.0, 20.0
    pacer.first, pacer.windows = 12.0, [(3, 27.0)]  # the first step (not trusted), then 9 s a step
    assert pacer.settled and plan_warning(pacer, 2, 12) == ""  # judged a quarter in, not before
    assert plan_warning(pacer, 3, 12) == (
        "this 5-minute budget leaves time for about 12 steps, fewer than the 30 a useful run "
        "needs (start-up took 80 s, the base validation 20 s, a step takes 9.0 s); it trains "
        "them and saves the adapter: give a longer budget, or a smaller batch or max length"
    )
    assert plan_warning(pacer, 4, 12) == ""  # once
    pacer.plan_judged = False
    assert plan_warning(pacer, 8, 30) == ""  # a plan of 30 is a useful run
    assert pacer.plan_judged and plan_warning(pacer, 9, 12) == ""  # and it was judged


def test_the_final_validation_is_left_out_when_the_budget_has_no_time_left_for_it():
    from finetune.train.budget import Costs, Pacer
    from finetune.train.budget_run import final_validation_fits

    cadence = {kind: Cadence(None) for kind in ("validation", "probes", "checkpoint")}
    said = []

    def emit(kind, **data):
        said.append(data["message"])

    pacer = Pacer(
        300, time.time() - 250, cadence=cadence, costs=Costs(2, 1, adapter_bytes=0, probe_cap=6.0)
    )
    pacer.costs.seen["validation"] = 40.0  # a pass measured at 40 s; 50 s are left
    assert final_validation_fits(pacer, emit) and said == []
    pacer.deadline -= 20  # a slow last step: 30 s left
    assert not final_validation_fits(pacer, emit)
    assert said == [
        "no time left in the budget for the final validation (a pass takes about 40 s, 30 s are "
        "left): the adapter is saved without it"
    ]
    assert final_validation_fits(None, emit)  # without a budget it always runs


def test_a_step_that_compiled_is_left_out_of_the_measured_step_time(monkeypatch):
    from finetune.train.budget import Costs, Pacer

    cadence = {kind: Cadence(None) for kind in ("validation", "probes", "checkpoint")}
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    pacer = Pacer(600, 1000.0, cadence=cadence, costs=Costs(0, 1, adapter_bytes=0, probe_cap=6))
    pacer.start()
    for step, (seconds, compiled) in enumerate(
        [(20.0, True), (0.5, False), (9.0, True), (0.5, False), (0.5, False)], 1
    ):
        clock[0] += seconds
        pacer.after_step(step, 1000, trusted=not compiled)
    # The first step is never trusted; the third compiled (a new length): neither is measured.
    assert pacer.first == 20.0 and pacer.windows == [(1, 0.5), (1, 0.5), (1, 0.5)]
    assert pacer.settled and pacer.seconds_per_step() == 0.5


def test_auto_on_a_cpu_takes_fewer_rows_a_step_where_the_last_speeds_buy_too_few_steps(
    tiny_llama_dir, home, short_budgets
):
    """A slow hour's record of these settings (1 s to start, 0.16 s a step of 8 rows) leaves an
    8-second budget 15 steps of 8 and 31 of 4: batch size auto trains at 4, says why, and the
    run's own speeds are kept beside the 8-row record, at 4."""
    from finetune.train import speed_record
    from finetune.train.budget_plan import Measured

    cfg = _budget_cfg(tiny_llama_dir, 8.0, batch_size="auto")
    speed_record.save(cfg, Measured(1.0, 0.16, 0.05, 3), "dry run", 8, "cpu")
    events = []
    result = train(cfg, on_event=events.append)
    (line,) = [
        e["message"] for e in events if e["type"] == "status" and "batch size auto" in e["message"]
    ]
    assert line.startswith(
        "batch size auto: 4 rows per micro-batch on the CPU (the 0.133333-minute budget buys "
        "about 31 steps of 4, 15 of 8: 30 are the fewest a useful run takes, at the speeds a "
        "dry run of these settings measured at "
    )
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["training"]["batch_size"] == 4 and manifest["training"]["batch_auto"] == {
        "batch": 4,
        "why": line,
        "trials": [],
    }
    measured, record = speed_record.load(cfg)
    assert (record["source"], record["batch"], record["on"]) == ("run", 4, "cpu")
    path = home / "speed" / f"{speed_record.settings_key(cfg)}.json"
    assert sorted(json.loads(path.read_text())["by_batch"]) == ["4", "8"]
