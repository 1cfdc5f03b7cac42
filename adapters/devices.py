"""CPU facts and the dtype the session serves in (no torch import at module load)."""

from __future__ import annotations

import os
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16", "float16")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads share a core's math units)."""
    cores, phys = set(), ""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "physical id":
            phys = value.strip()
        elif key.strip() == "core id":
            cores.add((phys, value.strip()))
    count = len(cores) or os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        count = min(count, len(os.sched_getaffinity(0)))
    return max(1, count)


def pick_dtype(dtype: str, device: str) -> str:
    """Resolve ``auto``: bf16 where the hardware computes it natively, else fp32.

    Decoding one token streams every weight through memory once, so on a CPU with native
    bf16 (AVX512-BF16/AMX) half-size weights decode about twice as fast; without it bf16
    is emulated and slower than fp32.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device == "cpu":
        flags = _cpuinfo()
        return "bfloat16" if "avx512_bf16" in flags or "amx_bf16" in flags else "float32"
    from finetune.gpu import cuda_bf16_native

    # Native bf16 only (compute 8.0+): a T4 or V100 would emulate it, slower than fp32.
    return "bfloat16" if cuda_bf16_native(device) else "float32"
