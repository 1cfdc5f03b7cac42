"""finetune/train/priority.py: ``python -m finetune train`` runs niced (TUNEDESK_TRAIN_NICE,
default 10) so serving goes first on shared cores, and a run that leads its session gives its
session group (autogroup) that niceness too; a bad value is one sentence and exit 2. (That a run
started by the app is niced: tests/finetune/train/test_runner.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from finetune.train import priority


def test_the_niceness_is_only_raised_never_lowered(monkeypatch):
    code = (
        "import os, sys; from finetune.train.priority import yield_cpu_to_serving as y; "
        "os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[1])); print(y())"
    )
    env = {k: v for k, v in os.environ.items() if k != priority.NICE_ENV}
    for start, want in ((0, 10), (15, 15)):
        out = subprocess.run(
            [sys.executable, "-c", code, str(start)], env=env, capture_output=True, text=True
        )
        assert int(out.stdout) == max(want, os.getpriority(os.PRIO_PROCESS, 0)), out.stderr
    out = subprocess.run(
        [sys.executable, "-c", code, "0"], env=env | {priority.NICE_ENV: "0"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert int(out.stdout) == os.getpriority(os.PRIO_PROCESS, 0)  # 0 keeps the caller's


def test_a_run_leading_its_session_lowers_the_sessions_share_and_one_in_a_terminal_does_not():
    if priority.session_niceness() is None:
        pytest.skip("this kernel groups no sessions (autogroup off)")
    code = (
        "from finetune.train import priority as p; p.yield_cpu_to_serving(); "
        "print(p.session_niceness())"
    )
    env = os.environ | {priority.NICE_ENV: "12"}
    ours = priority.session_niceness()
    led = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert int(led.stdout) == 12, led.stderr  # a new session's group starts at 0
    inside = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert int(inside.stdout) == ours, inside.stderr  # the caller's session is left as it was
    assert priority.session_niceness() == ours


@pytest.mark.parametrize("value", ["20", "-5", "low", "2.5"])
def test_a_niceness_that_is_not_0_to_19_is_a_sentence_and_exit_2(value):
    env = os.environ | {priority.NICE_ENV: value}
    out = subprocess.run(
        [sys.executable, "-m", "finetune", "train", "--help"], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"error: TUNEDESK_TRAIN_NICE must be a whole number from 0 to 19, not {value!r}"
    )
