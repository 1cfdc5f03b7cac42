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
# (128 MB in fp32, past the last-level cache), multiplied by the activations of one token and
# of a 16-row batch, as a decode step of one chat and of the batching scheduler does. bf16 must
# be clearly faster for one row (fp32 is the reference) and no slower for the batch: on 2 AMD
# EPYC cores without AVX512-BF16, bf16 ran one row 1.23x faster than fp32 but 16 rows 4.8x
# slower (emulated bf16 products are compute-bound there), so a server of many customers
# would have been three times slower in bf16 (docs/benchmarks.md).
PROBE_SHAPE = (1536, 576)
PROBE_PARAMS = 32 * 2**20
PROBE_ROWS = (1, 16)
BF16_MARGIN = 1.15


def pick_dtype(dtype: str, device: str) -> str:
    """Resolve ``auto``: on a CPU, the dtype a short measurement decodes fastest; on a GPU,
    bf16 where it is native, else fp32.

    Decoding one token streams every weight through memory once, so half-size bf16 weights can
    decode up to twice as fast; whether they do depends on the CPU's bf16 kernels, which flags
    alone do not tell (bf16 was measured faster than fp32 for one row on a CPU without
    AVX512-BF16, and far slower for a batch), so ``auto`` measures both
    (:func:`cpu_decode_rates`, once per process).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device == "cpu":
        return "bfloat16" if bf16_wins(cpu_decode_rates()) else "float32"
    from core.gpu import cuda_bf16_native

    # Native bf16 only (compute 8.0+): a T4 or V100 would emulate it, slower than fp32.
    return "bfloat16" if cuda_bf16_native(device) else "float32"


def bf16_wins(rates: dict[str, dict[int, float]]) -> bool:
    """bf16 by ``BF16_MARGIN`` faster for one row, and at least as fast for the batch."""
    one, batch = PROBE_ROWS
    return (
        rates["bfloat16"][one] >= BF16_MARGIN * rates["float32"][one]
        and rates["bfloat16"][batch] >= rates["float32"][batch]
    )


@functools.cache
def cpu_decode_rates(repeats: int = 3) -> dict[str, dict[int, float]]:
    """Decode-shaped passes per second on this CPU, ``{dtype: {rows: rate}}`` for fp32 and
    bf16 at 1 and 16 rows (best of ``repeats``).

    One pass multiplies the activations by 32M parameters of weights, the memory traffic of a
    quarter of SmolLM2-135M's decode step. fp32 runs the kernel the session runs it with
    (oneDNN's prepacked matmul, ``packed_linears.py``, unless switched off). Well under a second
    in all.
    """
    import torch

    rows, cols = PROBE_SHAPE
    count = max(1, PROBE_PARAMS // (rows * cols))
    names = ("float32", "bfloat16")
    kernels = {n: _probe_kernels(torch, getattr(torch, n), count) for n in names}
    best = {n: dict.fromkeys(PROBE_ROWS, float("inf")) for n in names}
    with torch.inference_mode():
        for i in range(repeats + 1):  # interleaved, so a busy moment hits both; pass 0 warms up
            for name in names:
                for batch in PROBE_ROWS:
                    x = torch.full((batch, cols), 0.5, dtype=getattr(torch, name))
                    start = time.perf_counter()
                    for kernel in kernels[name]:
                        kernel(x)
                    if i:
                        best[name][batch] = min(best[name][batch], time.perf_counter() - start)
    return {n: {b: 1.0 / max(t, 1e-9) for b, t in best[n].items()} for n in names}


def _probe_kernels(torch, dtype, count: int) -> list:
    """``count`` probe layers as callables ``x -> x @ W^T`` in ``dtype``."""
    from inference.packed_linears import ENV, packed_weight

    rows, cols = PROBE_SHAPE
    weights = [torch.full((rows, cols), 0.01, dtype=dtype) for _ in range(count)]
    if dtype == torch.float32 and os.environ.get(ENV, "all").strip().lower() in ("all", ""):
        try:
            packed = [packed_weight(w) for w in weights]
            linear = torch.ops.mkldnn._linear_pointwise
            return [lambda x, p=p: linear(x, p, None, "none", [], "") for p in packed]
        except (RuntimeError, AttributeError):  # no oneDNN here: the session runs F.linear too
            pass
    return [lambda x, w=w: torch.nn.functional.linear(x, w) for w in weights]


def dtype_reason(requested: str, device: str, chosen: str) -> str:
    """Why the session serves in ``chosen``, in a few words for the status line."""
    if requested != "auto":
        return "as set"
    if device == "cpu":
        rates = cpu_decode_rates()
        one, batch = PROBE_ROWS
        return (
            f"auto: bf16 decodes {rates['bfloat16'][one] / rates['float32'][one]:.2f}x fp32 "
            f"for one row, {rates['bfloat16'][batch] / rates['float32'][batch]:.2f}x for "
            f"{batch} rows here, measured"
        )
    return "auto: native bf16" if chosen == "bfloat16" else "auto: no native bf16 on this GPU"
