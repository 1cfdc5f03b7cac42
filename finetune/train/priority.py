"""``python -m finetune train`` runs at a lower CPU priority, so serving goes first.

On a machine of two cores, Chat, the ``/v1`` API and a training run share the cores. At the same
priority a training run's threads take their share from llama-server's at every layer and an
answer decodes several times slower; niced, the run yields the cores while an answer is decoded
and has them back in between (``python -m bench llama-threads --beside-training``;
docs/benchmarks.md). Alone on the machine a niced run is as fast as before: a priority only
orders processes that want the CPU at the same time.

Two priorities are lowered. The process's niceness orders it against the processes of its own
session. Where the kernel shares the CPU between sessions first
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1, most Linux kernels) that niceness does not
reach other sessions: the app's llama-server is one, and the app starts each run in a session of
its own. So a run that leads its session (as the app starts it) also gives its session's group
the same niceness (``/proc/self/autogroup``); a run started from a terminal leaves the terminal's
session as it is.

``TUNEDESK_TRAIN_NICE`` (0-19, default 10) sets the niceness; 0 keeps the caller's. A run is
never made more important than the process that started it (a niceness is only raised), and
processes it starts (torchrun's ranks) inherit it.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"
AUTOGROUP_FILE = "/proc/self/autogroup"
NICE_ENV = "TUNEDESK_TRAIN_NICE"
DEFAULT_NICE = 10


def wanted_niceness() -> int:
    """The niceness ``TUNEDESK_TRAIN_NICE`` asks for (default :data:`DEFAULT_NICE`).

    Raises:
        ValueError: the variable is not a whole number from 0 to 19.
    """
    said = os.environ.get(NICE_ENV, "").strip()
    if not said:
        return DEFAULT_NICE
    if not said.isdigit() or int(said) > 19:
        raise ValueError(f"{NICE_ENV} must be a whole number from 0 to 19, not {said!r}")
    return int(said)


def yield_cpu_to_serving() -> int:
    """Raise this process's niceness to :func:`wanted_niceness` (call it before any thread
    starts: on Linux a niceness is per thread, and new threads take their creator's). Returns
    the niceness now."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    wanted = wanted_niceness()
    if wanted > current:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    if os.getsid(0) == os.getpid():
        lower_session_share(wanted)
    return os.getpriority(os.PRIO_PROCESS, 0)


def session_niceness() -> int | None:
    """The niceness of this process's session group (autogroup), or None where the kernel
    groups no sessions."""
    try:
        if Path(AUTOGROUP_SWITCH).read_text().strip() != "1":
            return None
        said = Path(AUTOGROUP_FILE).read_text().split()  # "/autogroup-123 nice 0"
        return int(said[said.index("nice") + 1])
    except (OSError, ValueError, IndexError):
        return None


def lower_session_share(wanted: int) -> int | None:
    """Raise this session group's niceness to ``wanted`` (only raised, as the process's is),
    where the kernel groups sessions; the group's niceness now, or None where it has none. A
    kernel that refuses the write leaves the group as it was."""
    current = session_niceness()
    if current is not None and wanted > current:
        try:
            Path(AUTOGROUP_FILE).write_text(str(wanted))
        except OSError:
            return current
    return session_niceness()
