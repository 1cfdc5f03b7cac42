"""Keeping an installed optional library out of a process that has no use for it."""

from __future__ import annotations

import sys


def started_as(module: str) -> bool:
    """Whether this process was started as ``python -m <module>`` (its
    ``__main__`` is that module)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name in (module, f"{module}.__main__")


def keep_bitsandbytes_out() -> None:
    """Make ``import bitsandbytes`` fail in this process as if it were not installed.

    peft and transformers import bitsandbytes whenever it is installed, only to offer quantized
    layers, and it brings triton and parts of torch's inductor with it: a noticeable share of
    every process start on a small CPU. Call it first thing in a process that quantizes nothing
    (a command's ``__main__``, never a library function: a later caller in the same process may
    need it).
    :func:`core.hardware.detect` still reports the installed version (it reads the package's
    metadata). A process that already imported it keeps it.
    """
    sys.modules.setdefault("bitsandbytes", None)
