"""Is a training child running? Read from run folders alone: a live pid counts, a dead one,
a finished run or a stale queued one do not."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from core.activity import pid_alive, training_active


def _run(home, name, **status):
    folder = home / "runs" / name
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps(status))


def test_only_a_queued_or_running_run_with_a_live_process_counts(home):
    assert training_active() is False  # no runs folder yet
    _run(home, "done", state="done", pid=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _run(home, "died", state="running", pid=dead.pid)
    _run(home, "stale", state="queued", created=time.time() - 3600)
    assert training_active() is False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _run(home, "live", state="running", pid=child.pid)
        assert pid_alive(child.pid) and training_active() is True
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and training_active() is False


def test_a_run_being_launched_counts_before_its_pid_is_written(home):
    _run(home, "launching", state="queued", created=time.time())
    assert training_active() is True
