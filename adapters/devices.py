"""CPU facts and the dtype the session serves in (no torch import at module load)."""

from __future__ import annotations

import functools
import os
import time
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


# The decode probe: weight matrices shaped like a small model's MLP, 32M parameters in all
# (128 MB in fp32, past the last-level cache), each multiplied by one token's activations, as
# one decode step does. bf16 must be clearly faster to be chosen: fp32 is the reference.
PROBE_SHAPE = (1536, 576)
PROBE_PARAMS = 32 * 2**20
BF16_MARGIN = 1.15


def pick_dtype(dtype: str, device: str) -> str:
    """Resolve ``auto``: on a CPU, the dtype a short measurement decodes fastest; on a GPU,
    bf16 where it is native, else fp32.

    Decoding one token streams every weight through memory once, so half-size bf16 weights can
    decode up to twice as fast; whether they do depends on the CPU's bf16 kernels, which flags
    alone do not tell (bf16 was measured faster than fp32 on a CPU without AVX512-BF16), so
    ``auto`` measures (:func:`cpu_decode_rates`, once per process).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device == "cpu":
        rates = cpu_decode_rates()
        return "bfloat16" if rates["bfloat16"] >= BF16_MARGIN * rates["float32"] else "float32"
    from finetune.gpu import cuda_bf16_native

    # Native bf16 only (compute 8.0+): a T4 or V100 would emulate it, slower than fp32.
    return "bfloat16" if cuda_bf16_native(device) else "float32"


@functools.cache
def cpu_decode_rates(repeats: int = 3) -> dict[str, float]:
    """Decode-shaped passes per second on this CPU in fp32 and bf16 (best of ``repeats``).

    One pass multiplies one token's activations by 32M parameters of weights, the memory
    traffic of a quarter of SmolLM2-135M's decode step; it takes about 50-150 ms in all.
    """
    import torch

    rows, cols = PROBE_SHAPE
    count = max(1, PROBE_PARAMS // (rows * cols))
    names = ("float32", "bfloat16")
    weights = {n: [torch.full((rows, cols), 0.01, dtype=getattr(torch, n)) for _ in range(count)]
               for n in names}
    best = dict.fromkeys(names, float("inf"))
    with torch.inference_mode():
        for i in range(repeats + 1):  # interleaved, so a busy moment hits both; pass 0 warms up
            for name in names:
                x = torch.full((1, cols), 0.5, dtype=getattr(torch, name))
                start = time.perf_counter()
                for w in weights[name]:
                    torch.nn.functional.linear(x, w)
                if i:
                    best[name] = min(best[name], time.perf_counter() - start)
    rates = {n: 1.0 / max(t, 1e-9) for n, t in best.items()}
    return rates


def dtype_reason(requested: str, device: str, chosen: str) -> str:
    """Why the session serves in ``chosen``, in a few words for the status line."""
    if requested != "auto":
        return "as set"
    if device == "cpu":
        rates = cpu_decode_rates()
        return f"auto: bf16 decodes {rates['bfloat16'] / rates['float32']:.2f}x fp32 here, measured"
    return "auto: native bf16" if chosen == "bfloat16" else "auto: no native bf16 on this GPU"
