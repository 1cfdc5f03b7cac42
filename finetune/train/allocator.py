"""Training processes allocate through tcmalloc when the machine has it (Debian package
``libtcmalloc-minimal4``).

A training step allocates and frees gigabytes of activations in blocks of a few MiB. With
glibc's malloc the freed blocks stay resident, fragmented, so the process's peak memory grows
step after step far beyond what is ever live; tcmalloc keeps it near the live size at the same
speed (docs/benchmarks.md). Making glibc hand large blocks back (``mmap`` for every block)
also kept memory down but was much slower, because every step then faults its pages in again.

The allocator is chosen when a process starts (``LD_PRELOAD``), so ``python -m finetune train``
and ``python -m bench training`` re-execute themselves once with it;
``TUNEDESK_ALLOCATOR=system`` keeps glibc.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LIBRARY_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
SEARCH_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def find_tcmalloc() -> str | None:
    """Path of an installed tcmalloc shared library, or None."""
    for folder in SEARCH_DIRS:
        for name in LIBRARY_NAMES:
            path = Path(folder) / name
            if path.is_file():
                return str(path)
    return None


def env_with_tcmalloc(env: dict) -> dict | None:
    """``env`` plus tcmalloc in ``LD_PRELOAD``; None when there is nothing to change (already
    preloaded, turned off with ``TUNEDESK_ALLOCATOR=system``, not installed, not Linux)."""
    if env.get("TUNEDESK_ALLOCATOR", "tcmalloc") == "system" or not sys.platform.startswith(
        "linux"
    ):
        return None
    preload = env.get("LD_PRELOAD", "")
    if "tcmalloc" in preload:
        return None
    library = find_tcmalloc()
    if library is None:
        return None
    return {**env, "LD_PRELOAD": f"{library}:{preload}" if preload else library}


def reexec_with_tcmalloc(package: str, argv: list[str]) -> None:
    """Replace this process by ``python -m <package> <argv>`` under tcmalloc, if it applies
    (call before torch loads; returns only when nothing changes)."""
    env = env_with_tcmalloc(dict(os.environ))
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", package, *argv], env)


def in_use() -> str:
    """ "tcmalloc" or "glibc": what this process allocates with (for reports)."""
    return "tcmalloc" if "tcmalloc" in os.environ.get("LD_PRELOAD", "") else "glibc"
