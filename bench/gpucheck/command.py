"""`python -m bench gpu-check`: every CUDA path for a few steps on one GPU; a table of results.

Writes results.json and report.md to ``--out`` (default ``$TUNEDESK_HOME/gpu-check/<timestamp>``).
Exit code 0 when every row passed, 1 when one failed, 2 when there is no GPU or bad input.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def add_arguments(p) -> None:
    from bench.gpucheck.suite import ON_REQUEST, ROWS

    p.add_argument(
        "--model", default="default", help="base model: Hub id, local folder or 'default'"
    )
    p.add_argument(
        "--random-weights",
        action="store_true",
        help="random weights from the model's config.json (tests code paths; no weights read)",
    )
    p.add_argument(
        "--data", default="assets/demo_support.jsonl", help="dataset file, folder or Hub id"
    )
    p.add_argument(
        "--steps", type=int, default=5, help="optimizer steps per training row (default 5)"
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="micro-batch of the training rows (default 64)"
    )
    p.add_argument("--max-length", type=int, default=128, help="tokens per example (default 128)")
    p.add_argument(
        "--row-timeout", type=float, default=150, help="seconds allowed per row (default 150)"
    )
    p.add_argument(
        "--rows",
        default=",".join(ROWS),
        help=f"comma list of rows to run (default all: {','.join(ROWS)}; on request: "
        f"{','.join(ON_REQUEST)}, the Train tab's first run and its release checks)",
    )
    p.add_argument(
        "--default-minutes",
        type=float,
        default=10,
        help="the train-tab-default row's time budget in minutes (default 10, the Train tab's)",
    )
    p.add_argument("--out", help="output folder")


def _print_row(r) -> None:
    from bench.gpucheck.suite import markdown

    print(markdown([r]).splitlines()[2], flush=True)


def main(args) -> int:
    import torch

    from bench.gpucheck.suite import (
        ON_REQUEST,
        ROWS,
        CheckArgs,
        markdown,
        random_weights_copy,
        run_suite,
        save,
    )
    from core import paths

    if not torch.cuda.is_available():
        print("error: gpu-check needs a CUDA GPU, and torch sees none on this machine")
        return 2
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS + ON_REQUEST]
    if unknown or not rows or args.steps < 2 or args.batch_size < 1:
        raise ValueError(
            f"--rows takes {', '.join(ROWS + ON_REQUEST)} (got {', '.join(unknown) or 'none'}); "
            "--steps must be 2 or more and --batch-size 1 or more"
        )
    out = (
        Path(args.out) if args.out else paths.home() / "gpu-check" / time.strftime("%Y%m%d-%H%M%S")
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = (
            random_weights_copy(args.model, Path(tmp) / "model")
            if args.random_weights
            else args.model
        )
        check = CheckArgs(
            model=model,
            data=args.data,
            steps=args.steps,
            batch=args.batch_size,
            max_length=args.max_length,
            row_timeout=args.row_timeout,
            default_seconds=args.default_minutes * 60,
        )
        print(
            f"gpu-check on {torch.cuda.get_device_name(0)}: {len(rows)} rows, up to "
            f"{args.row_timeout:.0f} s each"
        )
        print("\n".join(markdown([]).splitlines()[:2]), flush=True)
        results = run_suite(check, rows, on_row=_print_row)
    save(results, out)
    print("\n" + markdown(results) + f"\n\nwritten to {out}")
    return 0 if all(r.passed for r in results) else 1
