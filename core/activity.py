"""Is a training child computing on this machine right now? Read from the run folders alone.

Serving asks this to use one thread per call while training shares the cores. It reads
``runs/*/status.json`` and checks the recorded pid, never touching a run's files: the
training runner (:mod:`finetune.train.runner`) owns them and records how a run ended.
"""

from __future__ import annotations

import os
from pathlib import Path

from core import paths
from core.events import read_status

ACTIVE_STATES = ("queued", "running", "stopping")
LAUNCH_GRACE_S = 30  # a queued run gets this long to receive its pid before it counts as lost


def process_start(pid: int | None) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``'s field 22),
    or None when there is no such process: with the pid, it names one process for good (a pid
    is reused; a pid and its start time are not)."""
    if not pid:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: count after the last ")"
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def is_process(pid: int | None, start: int | None, marker: str) -> bool:
    """True when ``pid`` is alive, started at ``start`` (when recorded) and its command line
    holds ``marker`` (a run's config path): the process a run recorded, not a stranger that
    got its pid since."""
    if not pid_alive(pid, start):
        return False
    try:
        command = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return False
    return marker in command


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    """True while process ``pid`` exists and is not a zombie (``start``: and it is the process
    that started then, see :func:`process_start`)."""
    if not pid:
        return False
    if start is not None and process_start(pid) != start:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie counts as dead. Never reap it here (no waitpid): the runner's watcher thread
    # owns its children, and reaping behind its back makes Popen.wait() report exit code 0.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def training_active() -> bool:
    """True while some run of the home folder is queued or running with a live process."""
    import time

    try:
        folders = [d for d in paths.subdir("runs").iterdir() if d.is_dir()]
    except OSError:
        return False
    for folder in folders:
        status = read_status(folder) or {}
        if status.get("state") not in ACTIVE_STATES:
            continue
        launching = (
            not status.get("pid") and time.time() - status.get("created", 0) < LAUNCH_GRACE_S
        )
        if launching or pid_alive(status.get("pid"), status.get("pid_start")):
            return True
    return False
