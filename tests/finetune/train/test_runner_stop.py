"""Stop signals only the process its run recorded: a stranger that got the run's pid (another
command line, or the same command started later) is never sent SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time

from core.activity import process_start
from core.events import write_status
from finetune.train import runner

SLEEPER = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
    "time.sleep(120)"
)


def sleeper(*args: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", SLEEPER, *args])
    deadline = time.monotonic() + 10
    while process_start(child.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the handler is set
    return child


def run_with(home, run_id: str, child: subprocess.Popen, start) -> None:
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    write_status(
        run_dir, state="running", run_id=run_id, created=time.time(), pid=child.pid, pid_start=start
    )


def test_stop_signals_the_recorded_process_and_no_stranger(home):
    config = str(home / "runs" / "ours" / "config.json")
    ours = sleeper("--config", config)
    stranger = sleeper("--config", "/elsewhere/config.json")  # another command line on the pid
    later = sleeper(
        "--config", str(home / "runs" / "late" / "config.json")
    )  # right command, other start
    try:
        run_with(home, "ours", ours, process_start(ours.pid))
        run_with(home, "theirs", stranger, process_start(stranger.pid))
        run_with(home, "late", later, process_start(later.pid) - 1)
        assert runner.stop("theirs")["state"] == "stopping"  # asked to stop; nothing signalled
        assert runner.stop("late")["state"] == "failed"  # its own process is gone: the run is over
        time.sleep(0.5)
        assert stranger.poll() is None and later.poll() is None  # neither was signalled
        runner.stop("ours")
        assert ours.wait(10) == 7  # SIGTERM reached the run's own process
    finally:
        for child in (ours, stranger, later):
            child.kill()
            child.wait()


def test_the_runs_command_stops_a_supervised_run_and_names_the_others_in_a_sentence(home, capsys):
    from finetune.__main__ import main

    ours = sleeper("--config", str(home / "runs" / "ours" / "config.json"))
    try:
        run_with(home, "ours", ours, process_start(ours.pid))
        (home / "runs" / "from-a-terminal").mkdir()  # a `finetune train` run: no status.json
        assert main(["runs", "--stop", "ours"]) == 0
        assert capsys.readouterr().out.startswith("ours: stopping")
        assert ours.wait(10) == 7
        assert main(["runs", "--stop", "nobody"]) == 2
        assert capsys.readouterr().err == "error: no run named 'nobody'\n"
        assert main(["runs", "--stop", "from-a-terminal"]) == 2
        assert "Ctrl-C in its terminal" in capsys.readouterr().err
    finally:
        ours.kill()
        ours.wait()
