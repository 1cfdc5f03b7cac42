"""``python -m bench gate-false-alarm``: how often the release gate flags a change that makes no
difference, with the gate's old rule and its current one.

Each simulated evaluation has ``--slices`` slices of ``--rows`` rows where the adapter and its
reference are equally good: per-row ROUGE-L-like scores and per-row NLL sums (perplexity) drawn
from one distribution for both. The old rule flagged a slice when its 95 % paired bootstrap CI
lay on the worse side of 0 (``eval.metrics``, each check on its own); the current one ranks each
delta among its paired swaps (``eval.significance``) and corrects over all slice checks with
Benjamini-Hochberg at 2.5 % (the slices' half of the gate's 5 %). ``--worse-slices K`` makes K
slices truly worse (every row's score lower by ``--shift``) to show what the gate still catches.

    python -m bench gate-false-alarm                       # 27 slices x 5 rows, 100 evaluations
    python -m bench gate-false-alarm --rows 12 --worse-slices 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from eval.metrics import bootstrap_delta_ci, perplexity_delta_ci
from eval.significance import (
    SLICE_FALSE_ALARM,
    benjamini_hochberg,
    mean_worse_p,
    perplexity_worse_p,
)


def one_evaluation(
    rng, slices: int, rows: int, worse: int, shift: float, seed: int
) -> tuple[bool, bool, int]:
    """(old rule flagged anything, new rule flagged anything, truly worse slices the
    new rule caught)."""
    old, p = False, []
    for s in range(slices):
        ref, new = rng.uniform(0.1, 0.6, rows), rng.uniform(0.1, 0.6, rows)
        if s < worse:
            new = new - shift
        tokens = rng.integers(10, 60, rows)
        ref_nll = {"nll": tokens * rng.uniform(0.8, 1.2, rows), "tokens": tokens}
        new_nll = {"nll": tokens * rng.uniform(0.8, 1.2, rows), "tokens": tokens}
        old = (
            old
            or bootstrap_delta_ci(ref, new, seed=seed)[2] < 0
            or perplexity_delta_ci(ref_nll, new_nll, seed=seed)[1] > 0
        )
        p += [mean_worse_p(ref, new, seed), perplexity_worse_p(ref_nll, new_nll, seed)]
    flagged = benjamini_hochberg(p) <= SLICE_FALSE_ALARM
    return old, bool(flagged.any()), int(flagged[: 2 * worse : 2].sum())


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    ap = argparse.ArgumentParser(
        prog="python -m bench gate-false-alarm", description=__doc__.splitlines()[0]
    )
    ap.formatter_class = DefaultsFormatter  # each flag's default in --help
    ap.add_argument(
        "--slices", type=int, default=27, help="slices per evaluation (Bitext: 27 intents)"
    )
    ap.add_argument("--rows", type=int, default=5, help="rows per slice")
    ap.add_argument("--evaluations", type=int, default=100)
    ap.add_argument(
        "--worse-slices", type=int, default=0, help="slices made truly worse (ROUGE-L-like score)"
    )
    ap.add_argument("--shift", type=float, default=0.2, help="how much worse, per row")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if (
        min(args.slices, args.rows, args.evaluations) < 1
        or not 0 <= args.worse_slices <= args.slices
    ):
        ap.error(
            "--slices, --rows and --evaluations must be 1 or more, --worse-slices from 0 to "
            "--slices"
        )
    rng, started = np.random.default_rng(args.seed), time.perf_counter()
    results = [
        one_evaluation(rng, args.slices, args.rows, args.worse_slices, args.shift, args.seed + i)
        for i in range(args.evaluations)
    ]
    old, new, caught = (np.mean([r[k] for r in results]) for k in range(3))
    print(
        f"{args.evaluations} evaluations, {args.slices} slices x {args.rows} rows x 2 metrics, "
        f"{args.worse_slices} slice(s) truly worse: the old rule flagged {old:.2f} of them, the "
        f"current rule {new:.2f}"
        + (
            f"; truly worse slices caught per evaluation: {caught:.2f} of {args.worse_slices}"
            if args.worse_slices
            else ""
        )
        + f" ({time.perf_counter() - started:.0f} s)"
    )
    return 0
