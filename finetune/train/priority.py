"""``python -m finetune train`` runs at a lower CPU priority, behind what shares its session.

On a machine of two cores, Chat, the ``/v1`` API and a training run share the cores. At the same
priority a training run's threads take their share from llama-server's at every layer and an
answer decodes several times slower; niced, the run yields the cores while an answer is decoded
and has them back in between (``python -m bench llama-threads --nice 10``; docs/benchmarks.md).
Alone on the machine a niced run is as fast as before: niceness only orders processes that want
the CPU at the same time.

A niceness orders the processes of one session. Where the kernel shares the CPU between
sessions first (``/proc/sys/kernel/sched_autogroup_enabled`` = 1, most Linux kernels), a run the
app starts (a session of its own) still takes half the cores beside the app; the niceness then
orders it against what runs in its own session, and it yields to a server started beside it in
one (a terminal, a service unit without sessions).

``TUNEDESK_TRAIN_NICE`` (0-19, default 10) sets the niceness; 0 keeps the caller's. A run is
never made more important than the process that started it (a niceness is only raised), and
processes it starts (torchrun's ranks) inherit it.
"""

from __future__ import annotations

import os

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
    return os.getpriority(os.PRIO_PROCESS, 0)
