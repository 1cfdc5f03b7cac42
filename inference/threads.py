"""How many threads a model call uses on the CPU.

OpenMP's default lets idle threads spin briefly between operations, which decode (hundreds
of small matrix-vector products per token) needs: passive waiting makes decode much slower
(docs/benchmarks-log.md, "OpenMP waiting"). While a training process shares the cores,
spinning threads would starve it and be starved in turn, so then a call runs on one thread,
which has no team to wait for. The session's ``cores_busy`` says when that is; the training
child waits passively.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress


def set_call_threads(torch, threads: int | None, cores_busy: Callable[[], bool] | None) -> None:
    """Set this thread's torch thread count for one call (OpenMP's setting is per thread).

    Args:
        threads: the session's thread count (None: not on the CPU, leave it).
        cores_busy: asked first; True (another process computes on these cores) means one.
    """
    if not threads:
        return
    busy = False
    if cores_busy is not None:
        with suppress(Exception):  # a failing probe must not fail the answer
            busy = bool(cores_busy())
    torch.set_num_threads(1 if busy else threads)


def serving_threads() -> int:
    """Threads the session serves with on the CPU: the physical cores torch may use (set now).

    Hyper-threads share a core's matmul units, so more threads than cores only add waiting.
    """
    import torch

    from inference.devices import physical_cores

    threads = min(torch.get_num_threads(), physical_cores())
    torch.set_num_threads(threads)
    return threads
