"""A time budget for preference runs (finetune/train/preference_budget.py) on the tiny llama
model: the run ends on time with its schedule, its epochs cap it, and a budget spent before
training (DPO's reference pass) still ends in a saved adapter with a warning."""

from __future__ import annotations

import json
import time

import pytest
from shelf_helpers import put_adapter

from finetune import config
from finetune.train.preference import PreferenceConfig, train_preference

QUESTIONS = [
    "Where is my order?",
    "Can I get a refund?",
    "How do I reset my password?",
    "Is my parcel late?",
    "Cancel my order please",
    "Change my address",
    "Talk to an agent",
    "My card was charged twice",
]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [
        {"prompt": q, "chosen": "Here is how: open Orders.", "rejected": "No idea."}
        for q in QUESTIONS
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def warm_up(pairs_file) -> None:
    """One untimed step first: the first preference run in a process imports TRL, peft and the
    model classes (4 s of a 6-second budget here when this test ran first in its process, none
    after another preference test), so the budget's pacing is what the test measures."""
    train_preference(
        PreferenceConfig(
            "support",
            str(pairs_file),
            name="warm",
            method="cpo",
            max_steps=1,
            batch_size=2,
            learning_rate=1e-3,
        )
    )


@pytest.fixture
def short_budgets(monkeypatch):
    """Budgets of a few seconds (the settings allow 30 s and up), so the tests stay fast."""
    monkeypatch.setattr(config, "BUDGET_RANGE_S", (1, 7 * 24 * 3600))


def test_a_budget_ends_a_preference_run_on_time_with_its_schedule(
    home, tiny_llama_dir, pairs_file, short_budgets
):
    put_adapter(tiny_llama_dir, "support")
    logs, events = [], []

    def slow_steps(
        step, total, values
    ):  # the tiny model's steps take milliseconds: make them 0.25 s
        if "loss" in values:  # a step's figures (the last log is the run's summary)
            logs.append((step, total, values))
            time.sleep(0.25)

    warm_up(pairs_file)
    t0 = time.time()
    # 8 pairs in batches of 2: 4 steps an epoch; 50 epochs (200 steps) would take ~50 s
    result = train_preference(
        PreferenceConfig(
            "support",
            str(pairs_file),
            name="paced",
            method="cpo",
            epochs=50,
            batch_size=2,
            learning_rate=1e-3,
            time_budget_s=6.0,
        ),
        on_log=slow_steps,
        on_event=events.append,
        started=t0,
    )
    took = time.time() - t0
    assert 4.5 < took < 6.0 + 0.3, f"{took:.2f} s"  # within the budget, most of it used
    assert result.status == "completed" and 8 <= result.steps < 200
    last_step, last_total, last_values = logs[-1]
    assert last_step == last_total == result.steps  # the plan shown ends where the run did
    # The linear decay ends with the run: its last step takes the last 1/N of the learning rate,
    # or 2/(N+1) when a step slower than the plan (the machine got busy) took the last planned
    # step away only after the lr of the step before was set: never more.
    last_lr = last_values["learning_rate"]
    assert last_lr == pytest.approx(1e-3 / result.steps, rel=1e-6) or last_lr == pytest.approx(
        2e-3 / (result.steps + 1), rel=1e-6
    ), (last_lr, result.steps)
    assert max(v["learning_rate"] for _, _, v in logs) > 0.5e-3
    progress = [e for e in events if e["type"] == "progress"]
    assert progress[-1]["step"] == progress[-1]["total_steps"] == result.steps
    manifest = json.loads((result.path / "manifest.json").read_text())
    b = manifest["budget"]
    assert (b["seconds"], b["steps"], manifest["steps"], manifest["total_steps"]) == (
        6.0,
        *[result.steps] * 3,
    )
    assert b["rows_seen"] == 2 * result.steps and b["epochs"] == pytest.approx(
        result.steps / 4, abs=1e-3
    )
    assert (
        b["seconds_used"] <= 6.0 + 0.3
        and b["tokens_seen"] > b["rows_seen"]
        and not b["reference_cut"]
    )
    assert manifest["preference"]["time_budget_s"] == 6.0


def test_the_methods_epochs_cap_a_budget_run(home, tiny_llama_dir, pairs_file):
    """A budget ends a preference run sooner, never later: 1 epoch of 8 pairs is 2 steps of 4,
    in a second, though 5 minutes would buy hundreds."""
    put_adapter(tiny_llama_dir, "support")
    t0 = time.time()
    result = train_preference(
        PreferenceConfig(
            "support", str(pairs_file), name="capped", epochs=1, batch_size=4, time_budget_s=300
        ),
        started=t0,
    )
    assert result.steps == 2 and result.status == "completed" and time.time() - t0 < 60
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert (
        manifest["total_steps"],
        manifest["budget"]["rows_seen"],
        manifest["budget"]["epochs"],
    ) == (2, 8, 1.0)


def test_a_budget_spent_before_training_still_saves_and_says_why(
    home, tiny_llama_dir, pairs_file, short_budgets
):
    """Loading took the whole budget (a huge pairs file, a slow disk): DPO's reference pass stops
    at once, the run takes the one step it must and saves, and a warning says
    where the time went."""
    put_adapter(tiny_llama_dir, "support")
    events = []
    result = train_preference(
        PreferenceConfig(
            "support", str(pairs_file), name="late", epochs=3, batch_size=2, time_budget_s=20.0
        ),
        on_event=events.append,
        started=time.time() - 21.0,
    )
    assert (result.status, result.steps) == ("completed", 1)
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert warnings == [
        "the time budget ran out while scoring DPO's reference: the run trains only in what is "
        "left of it (scoring the reference at each step); give it more minutes or fewer pairs"
    ]
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["budget"]["reference_cut"] and manifest["steps"] == 1


def test_the_cli_trains_a_preference_run_for_a_time_budget(
    home, tiny_llama_dir, pairs_file, capsys, monkeypatch
):
    from finetune.__main__ import main
    from finetune.commands import train as train_command

    # The budget counts from the process's start: here that is pytest's, minutes ago in a suite.
    started = []
    monkeypatch.setattr(
        train_command, "process_start", lambda: started.append(time.time()) or started[-1]
    )
    put_adapter(tiny_llama_dir, "support")
    assert (
        main(
            [
                "train",
                "--method",
                "cpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--time-budget",
                "2m",
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--name",
                "cli-paced",
            ]
        )
        == 0
    )
    shown = capsys.readouterr()
    assert json.loads(shown.out[shown.out.index("{") :])["steps"] == 2
    manifest = json.loads((home / "adapters" / "cli-paced" / "manifest.json").read_text())
    assert (
        manifest["budget"]["seconds"] == 120
        and manifest["budget"]["steps"] == 2
        and len(started) == 1
    )
    assert (
        main(
            [
                "train",
                "--method",
                "cpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--time-budget",
                "10s",
                "--name",
                "too-short",
                "--quiet",
            ]
        )
        == 2
    )
    assert "time budget must be 0 (off) or between 30 seconds and 7 days" in capsys.readouterr().err


def test_a_plan_that_grows_at_its_last_step_keeps_training():
    """transformers' flow callback stops a run whose step reached ``state.max_steps`` (the last
    plan's end) before the budget's callback re-plans; a plan that grew there goes on (a run
    in the suite once stopped at step 19 of a plan of 20)."""
    import torch
    from transformers import TrainerControl, TrainerState

    from finetune.train.preference_budget import PreferenceBudget
    from finetune.train.steps import build_scheduler

    budget = PreferenceBudget(600, time.time(), device="cpu", trainable=10, grad_accum=1)
    budget.pacer.after_step = lambda step, total: 20  # this step's measurement: one more fits
    budget.cap, budget.planned = 200, 19
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = build_scheduler(optimizer, "linear", 0.0, 19)
    for _ in range(19):  # the 19 steps taken: the decay is at its end
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [0.0]
    state, control = (
        TrainerState(global_step=19, max_steps=19),
        TrainerControl(should_training_stop=True),
    )
    budget.callback().on_step_end(None, state, control, lr_scheduler=scheduler)
    assert not control.should_training_stop and state.max_steps == 20
    assert scheduler.get_last_lr() == [pytest.approx(1 / 20)]  # the decay stretched to the new end
    budget.pacer.after_step = lambda step, total: step  # the next step: time is up
    state.global_step = 20
    budget.callback().on_step_end(None, state, control, lr_scheduler=scheduler)
    assert control.should_training_stop and state.max_steps == 20
