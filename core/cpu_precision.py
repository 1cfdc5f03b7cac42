"""Whether this CPU trains faster in bf16 than in fp32, measured (no torch import at module load).

Training a LoRA is compute-bound: every step multiplies a few thousand tokens' activations by
every weight of the model, forward and back. On a CPU with native bf16 products (AVX512-BF16,
AMX) bf16 runs those products about twice as fast as fp32; without them bf16 is emulated and
several times slower. Flags alone do not say how fast a given CPU's kernels are, so
:func:`cpu_trains_faster_in_bf16` times one training-shaped product in both, once per process.
Emulated bf16 is the slow case to time, and the probe is paid by every training run and app
start, so a small product is timed first, and where bf16 is that far behind it decides alone.
docs/benchmarks.md has the probe's cost and the speed-ups it found.
"""

from __future__ import annotations

import functools
import time

# 8 examples x 128 tokens through SmolLM2-135M's MLP up-projection (576 -> 1536).
PROBE_SHAPE = (1024, 576, 1536)
# First, one example's worth of the same product: where bf16 runs under a fifth of fp32's rate
# on it (emulated bf16 is many times slower still), the full probe could only confirm a "no".
# Not half: on a loaded machine one busy moment can put native bf16 under half fp32's rate on
# this small product while the full probe finds it faster.
SCREEN_SHAPE = (128, 576, 1536)
SCREEN_VERDICT = 0.2
SCREEN_REPEATS = 3
# bf16 must multiply this much faster before a run trains in it: the step gains less than the
# product does (1.4x of 2.1x above), and bf16 costs some precision.
BF16_TRAIN_MARGIN = 1.5


@functools.cache
def training_matmul_rates(repeats: int = 3) -> dict[str, float]:
    """GFLOP/s of :data:`PROBE_SHAPE`'s product on this CPU, ``{"fp32": r, "bf16": r}`` (best
    of ``repeats`` after one warm-up, the two dtypes interleaved so a busy moment hits both);
    :data:`SCREEN_SHAPE`'s rates where bf16 was far behind on that smaller product already."""
    screen = matmul_rates(SCREEN_SHAPE, repeats=SCREEN_REPEATS)
    if screen["bf16"] < SCREEN_VERDICT * screen["fp32"]:
        return screen
    return matmul_rates(PROBE_SHAPE, repeats)


def matmul_rates(shape: tuple[int, int, int], repeats: int) -> dict[str, float]:
    """GFLOP/s of an (m x k) @ (k x n) product in fp32 and bf16: best of ``repeats`` timed runs
    after one warm-up, the dtypes interleaved."""
    import torch

    m, k, n = shape
    pairs = {
        name: (torch.full((m, k), 0.5, dtype=dtype), torch.full((k, n), 0.01, dtype=dtype))
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    best = dict.fromkeys(pairs, float("inf"))
    with torch.inference_mode():
        for i in range(repeats + 1):
            for name, (a, b) in pairs.items():
                start = time.perf_counter()
                a @ b
                if i:
                    best[name] = min(best[name], time.perf_counter() - start)
    return {name: 2 * m * k * n / max(seconds, 1e-9) / 1e9 for name, seconds in best.items()}


def bf16_speedup(rates: dict[str, float] | None = None) -> float:
    """How many times faster the probe's product ran in bf16 than in fp32."""
    rates = rates or training_matmul_rates()
    return rates["bf16"] / max(rates["fp32"], 1e-9)


def cpu_trains_faster_in_bf16(rates: dict[str, float] | None = None) -> bool:
    """True when bf16 products ran at least ``BF16_TRAIN_MARGIN`` times as fast as fp32 here."""
    return bf16_speedup(rates) >= BF16_TRAIN_MARGIN


def bf16_note(rates: dict[str, float] | None = None) -> str:
    """The measurement in words, for the Train tab's note on bf16."""
    return (
        f"bf16 matrix products ran {bf16_speedup(rates):.2f}x as fast as fp32 on this CPU "
        f"(measured; training defaults to bf16 at {BF16_TRAIN_MARGIN}x or more)"
    )
