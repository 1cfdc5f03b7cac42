"""`python -m finetune train --time-budget 10m`: the flag's durations, its errors, the dry run."""

import argparse
import json
import subprocess
import sys
import time

import pytest

from finetune.__main__ import main
from finetune.commands.train import add_arguments, build_config, process_start
from finetune.commands.train_flags import parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 90),
        ("90s", 90),
        ("10m", 600),
        ("1.5h", 5400),
        (" 2 M ", 120),
        ("0", 0),
        ("2d", 172800),
        ("45.5", 45.5),
    ],
)
def test_durations_read_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


def test_the_flag_sets_the_budget_and_the_rest_stays():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = build_config(parser.parse_args(["--time-budget", "10m", "--max-steps", "7"]))
    assert cfg.train.time_budget_s == 600 and cfg.train.max_steps == 7
    assert build_config(parser.parse_args([])).train.time_budget_s == 0  # off unless asked for


def test_the_budget_counts_from_the_process_start():
    code = (
        "import time; time.sleep(1); from finetune.commands.train import process_start as p; "
        "print(time.time() - p())"
    )
    age = float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    assert (
        1.0 <= age < 3.0
    )  # the second slept, the interpreter's start and the /proc clock's rounding
    assert process_start() <= time.time()


@pytest.mark.parametrize("bad", ["10x", "ten minutes", "-5m", "1h30m", ""])
def test_a_bad_duration_is_an_error_naming_the_flag(bad, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", f"--time-budget={bad}"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --time-budget" in err and "is not a duration" in err
    assert "90s, 10m, 1.5h" in err and "Traceback" not in err


def test_a_budget_out_of_range_is_refused_in_words(tiny_llama_dir, home, capsys):
    assert main(["train", "--model", str(tiny_llama_dir), "--time-budget", "10s"]) == 2
    err = capsys.readouterr().err
    assert (
        "time budget must be 0 (off) or between 30 seconds and 7 days (604800 s) (got 10.0)" in err
    )


def test_the_dry_run_says_the_run_takes_the_budget(tiny_llama_dir, home, capsys, monkeypatch):
    from finetune.commands import train as train_command

    monkeypatch.setattr(train_command, "process_start", time.time)  # as if this process started now
    code = main(
        [
            "train",
            "--dry-run",
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
            "--max-steps",
            "10",
            "--time-budget",
            "1m",
        ]
    )
    assert code == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["projected_seconds"] == 60
    b = report[
        "budget"
    ]  # the steps the budget buys once start-up and validation are paid, not max-steps
    assert report["total_steps"] == b["steps"] > 10 and b["steps"] < int(60 / b["step_s"])
    assert (
        f"time budget: A 1-minute budget buys about {b['steps']} steps here: start-up " in out.err
    )
