"""Supervised training runs: each run is a child process writing files into its run folder.

``<run>/config.json`` (settings), ``events.jsonl`` (progress), ``train.log`` (stdout+stderr),
``status.json`` (queued/running/stopping/done/failed/stopped, pid, exit reason). The parent
keeps nothing in memory that it cannot rebuild from those files, so listing and re-attaching
work after a page reload or an app restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core import paths
from core.activity import ACTIVE_STATES as ACTIVE
from core.activity import LAUNCH_GRACE_S, is_process, pid_alive, process_start
from core.events import read_events, read_status, write_status
from finetune.config import RunConfig
from finetune.train.run_state import NOTHING_SAVED

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunInfo:
    run_id: str
    run_dir: Path
    status: dict

    @property
    def state(self) -> str:
        return self.status.get("state", "unknown")


def log_tail(run_dir: Path, lines: int = 20) -> str:
    try:
        text = (run_dir / "train.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start(cfg: RunConfig, run_id: str | None = None) -> RunInfo:
    """Start training in a child process; refuses while another run is active.

    Raises:
        RuntimeError: another run is still going (one heavy job at a time).
        OSError: the home folder cannot take writes (read-only, full), in words.
    """
    from filelock import FileLock

    paths.check_writable(paths.subdir("runs"))  # a read-only or full home: say so, in words
    # The lock makes "check nothing is running, then register and launch" one step: two
    # browser tabs pressing Start together get one run and one clear refusal. The launch is
    # inside it too, so no one sees a registered run without its pid.
    with FileLock(str(paths.subdir("runs") / ".start.lock")):
        _refuse_if_active()
        run_id = paths.safe_name(run_id or time.strftime("run-%Y%m%d-%H%M%S"), "run id")
        run_dir = paths.subdir("runs") / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        cfg.run.run_dir = str(run_dir)
        cfg.save(run_dir / "config.json")
        write_status(run_dir, state="queued", run_id=run_id, created=time.time())
        proc = _launch(run_dir)
        # The pid with its start time names this child for good: Stop never signals a
        # process that got the pid after the run ended.
        write_status(
            run_dir,
            state="running",
            pid=proc.pid,
            pid_start=process_start(proc.pid),
            started=time.time(),
        )
    _watch(proc, run_dir)
    return RunInfo(run_id, run_dir, read_status(run_dir) or {})


def _launch(run_dir: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "finetune",
        "train",
        "--config",
        str(run_dir / "config.json"),
        "--events",
        str(run_dir / "events.jsonl"),
        "--quiet",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TUNEDESK_HOME": str(paths.home())}
    # The app's chat shares the cores: the child's idle OpenMP threads sleep instead of
    # spinning (big training matmuls lose nothing by it). Must be set before torch loads.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with open(run_dir / "train.log", "ab") as log:
        # Its own session: Ctrl-C in the app does not kill it, and it outlives an app restart.
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=_PROJECT_ROOT,
            env=env,
            start_new_session=True,
        )


_WATCHERS: dict[str, threading.Thread] = {}  # run dir -> thread waiting on a child we started


def _watch(proc: subprocess.Popen, run_dir: Path) -> None:
    """Record the exit in status.json when the child ends (a thread, so the parent is free)."""

    def wait() -> None:
        code = proc.wait()
        _finalize(run_dir, code)

    thread = threading.Thread(target=wait, daemon=True, name=f"watch-{run_dir.name}")
    _WATCHERS[str(run_dir)] = thread
    thread.start()


def _finalize(run_dir: Path, code: int | None) -> dict:
    """Decide the final state from the events the child wrote and its exit code.

    A "saved" event means a complete adapter is on the shelf (saving is atomic), even when
    the process died before its "done" event: that run is reported done, with how it ended.
    """
    events, _ = read_events(run_dir / "events.jsonl")
    last = {e.get("type"): e for e in events}
    ended = "the training process disappeared" if code is None else f"exit code {code}"
    if code is not None and code < 0:
        ended = f"killed by signal {-code}"
    finished = last.get("done") or last.get("saved") or _published(run_dir)
    adapter = finished.get("adapter") if finished else None
    if adapter:
        state = "stopped" if finished.get("status") == "stopped" else "done"
        reason = (
            "stopped by user; adapter saved at the current step"
            if state == "stopped"
            else "finished"
        )
        if "done" not in last:
            reason += f" (the adapter was saved, then the process ended: {ended})"
        return write_status(
            run_dir,
            state=state,
            exit_code=code,
            adapter=adapter,
            finished=time.time(),
            reason=reason,
        )
    if _stopped_before_training(run_dir, events):
        return write_status(
            run_dir, state="stopped", exit_code=code, finished=time.time(), reason=NOTHING_SAVED
        )
    return write_status(
        run_dir,
        state="failed",
        exit_code=code,
        finished=time.time(),
        reason=ended,
        log_tail=log_tail(run_dir),
    )


def _stopped_before_training(run_dir: Path, events: list[dict]) -> bool:
    """Stop was pressed and no step ran: the child said it stopped with nothing to save, or the
    SIGTERM reached it before it could (still starting up, before its handler was set)."""
    if any(e.get("type") in ("progress", "checkpoint") for e in events):
        return False
    done = next((e for e in reversed(events) if e.get("type") == "done"), None)
    if done is not None:
        return done.get("status") == "stopped" and not done.get("adapter")
    return (run_dir / "stop").exists()


def _published(run_dir: Path) -> dict | None:
    """The adapter this run put on the shelf, when it died between the rename and "saved".

    The manifest names its run folder, so the shelf itself says whether the save completed.
    """
    for manifest in paths.subdir("adapters").glob("*/manifest.json"):
        if manifest.parent.name.startswith("."):  # a temp folder that never made it
            continue
        try:
            if manifest.stat().st_size > 4 << 20:  # no real manifest is this big
                continue
            found = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(found, dict) and found.get("run_dir") == str(run_dir):
            return {"adapter": manifest.parent.name, "status": found.get("status")}
    return None


def refresh(run_dir: Path) -> dict:
    """Current status; a run whose process died without a word is marked failed."""
    status = read_status(run_dir) or {"state": "failed", "reason": "no status.json"}
    launching = status.get("state") == "queued" and not status.get("pid")
    if launching and time.time() - status.get("created", 0) < LAUNCH_GRACE_S:
        return status  # start() is launching it right now
    if status.get("state") in ACTIVE and not pid_alive(status.get("pid"), status.get("pid_start")):
        watcher = _WATCHERS.get(str(run_dir))
        if watcher is not None:
            watcher.join(timeout=10)  # our own child: its watcher records the real exit code
        status = read_status(run_dir) or status
        if status.get("state") in ACTIVE:
            status = _finalize(run_dir, status.get("exit_code"))
    return status


def stop(run_id: str) -> dict:
    """Ask a run to finish its current step and save (stop file + SIGTERM). The signal goes
    only to the process the run recorded: same pid, same start time, its config on the
    command line."""
    run_dir = paths.subdir("runs") / paths.safe_name(run_id, "run id")
    status = refresh(run_dir)
    if status.get("state") not in ACTIVE:
        return status
    # "stopping" first: the watcher's final state must not be overwritten by it afterwards.
    status = write_status(run_dir, state="stopping")
    (run_dir / "stop").touch()
    pid = status.get("pid")
    if is_process(pid, status.get("pid_start"), str(run_dir / "config.json")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)
    return read_status(run_dir) or status


def check_can_start() -> None:
    """Raise what :func:`start` would say about the home or a run still going, at once.

    A front end asks this before its slower checks (reading the dataset, resolving the base
    model), so a busy or read-only home is reported first and quickly. ``start`` checks again
    under its lock.
    """
    paths.check_writable(paths.subdir("runs"))
    _refuse_if_active()


def _refuse_if_active() -> None:
    active = [r for r in list_runs() if r.state in ACTIVE]
    if active:
        raise RuntimeError(
            f"run {active[0].run_id} is still {active[0].state}; stop it or wait for it to finish"
        )


def list_runs() -> list[RunInfo]:
    """Every run in the home folder, newest first, with refreshed status."""
    root = paths.subdir("runs")
    runs = [
        RunInfo(d.name, d, refresh(d))
        for d in root.iterdir()
        if d.is_dir() and (d / "status.json").exists()
    ]
    return sorted(runs, key=lambda r: r.status.get("created", 0), reverse=True)


def any_running() -> bool:
    """True while a training run is queued or running (its child process shares the cores)."""
    try:
        return any(r.state in ACTIVE for r in list_runs())
    except OSError:
        return False


def get(run_id: str) -> RunInfo:
    run_dir = paths.subdir("runs") / paths.safe_name(run_id, "run id")
    if not run_dir.is_dir():
        raise ValueError(f"no run named {run_id!r}")
    return RunInfo(run_id, run_dir, refresh(run_dir))


def events(run_id: str, offset: int = 0) -> tuple[list[dict], int]:
    return read_events(get(run_id).run_dir / "events.jsonl", offset)


def config_of(run_id: str) -> dict:
    return json.loads((get(run_id).run_dir / "config.json").read_text())
