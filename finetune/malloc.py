"""Give freed tensor memory back to the operating system (glibc only).

glibc keeps freed blocks below its dynamic mmap threshold (which grows up to 32 MiB) in its
heaps, and each training step allocates and frees gigabytes of activations in blocks of a
few MiB. Measured on SmolLM2-135M at batch 8 x 128 (docs/benchmarks.md): the process's peak
memory grew from 3.7 to 4.3 GiB over four steps; with large blocks served by ``mmap`` (and
so unmapped on free) it stayed at 2.7 GiB with no loss of speed. ``MALLOC_MMAP_THRESHOLD_``
in the environment, if set, wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 64 * 1024
TRIM_THRESHOLD_BYTES = 16 * 2**20


def return_freed_memory_to_os() -> bool:
    """Serve allocations of 64 KiB and more with ``mmap``; True if glibc took the setting."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not hasattr(os, "sched_getaffinity"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return ok
