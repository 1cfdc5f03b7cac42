"""`python -m bench train-beside-build`: its flags refused in words, the run it times is the
Train tab's first run with fixed steps, and a build's whole session ends with the mode."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from bench import train_beside_build as bench
from finetune.config import RunConfig, first_run_defaults


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--modes", "alone,fast"], "--modes takes alone, beside, waiting, not fast"),
        (["--steps", "3"], "--steps must be 4 or more"),
    ],
)
def test_bad_flags_are_refused_in_words(argv, said, capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2 and said in capsys.readouterr().err


def test_the_timed_run_is_the_train_tabs_first_run_with_fixed_steps(tmp_path):
    cfg = RunConfig.load(bench.run_config(tmp_path, 10))
    tab = first_run_defaults()
    assert (cfg.train.max_steps, cfg.train.time_budget_s, cfg.train.log_every) == (10, 0, 1)
    assert cfg.train.eval_every == cfg.train.probe_every == cfg.train.save_every == 0
    assert cfg.data.path == str(bench.DEMO_DATA) and bench.DEMO_DATA.is_file()
    for field in ("precision", "learning_rate", "batch_size", "grad_accum"):
        assert getattr(cfg.train, field) == getattr(tab.train, field), field
    assert cfg.data.with_passages == tab.data.with_passages
    assert cfg.data.max_samples == tab.data.max_samples


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_builds_session_ends_whole_even_with_a_stopped_group(tmp_path):
    """The pauser's build is a stopped process group inside the session: it goes too."""
    inner = "sh -c 'echo $$ > inner.pid; sleep 60' & wait"
    group_of_its_own = "import subprocess as s, sys; s.Popen(sys.argv[1:], process_group=0).wait()"
    cmd = [sys.executable, "-c", group_of_its_own, "sh", "-c", inner]
    proc = bench.in_own_session(cmd, tmp_path / "log", 19, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while not (tmp_path / "inner.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    inner_pid = int((tmp_path / "inner.pid").read_text())
    group = os.getpgid(inner_pid)
    assert group not in (proc.pid, os.getpgid(0))  # a group of its own, as the pauser's build
    os.killpg(group, signal.SIGSTOP)
    bench.end_session(proc.pid)
    assert proc.wait(timeout=10) != 0
    deadline = time.monotonic() + 10
    while not gone(inner_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(inner_pid)
