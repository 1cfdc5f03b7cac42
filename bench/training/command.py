"""`python -m bench training`: seed recipe vs TuneDesk training throughput over a grid.

Comma lists make a grid (cartesian product); combinations this machine cannot run are skipped
with the reason. Each row runs in its own process (``--_one``, internal). Writes results.csv,
report.md, throughput.png and results.json to ``--out`` (default
``$TUNEDESK_HOME/bench/<timestamp>/``); ``--write-docs`` appends the report to
docs/benchmarks-log.md. ``--find-max-batch`` searches the largest micro-batch on a CUDA GPU instead.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

GRID_FLAGS = [  # (flag, Grid field, item type, default, help)
    ("--device", "device", str, "auto", "devices: cpu, cuda, cuda:N, auto"),
    ("--batch-size", "batch", int, "4", "micro-batch sizes"),
    ("--grad-accum", "accum", int, "1", "gradient accumulation steps"),
    ("--precision", "precision", str, "fp32", "fp32, fp16, bf16"),
    ("--quantization", "quantization", str, "none", "none, 8bit, 4bit"),
    (
        "--recipe",
        "recipe",
        str,
        "seed,tunedesk",
        "seed (HF Trainer, padded, all logits) and/or tunedesk",
    ),
]


def add_arguments(p) -> None:
    for flag, _, _, default, help_text in GRID_FLAGS:
        p.add_argument(flag, default=default, help=f"comma list: {help_text} (default {default})")
    p.add_argument(
        "--model", default="default", help="base model: Hub id, local folder or 'default'"
    )
    p.add_argument(
        "--data", default="assets/demo_support.jsonl", help="dataset file, folder or Hub id"
    )
    p.add_argument("--max-length", type=int, default=128, help="tokens per example (default 128)")
    p.add_argument(
        "--max-samples", type=int, default=None, help="use at most N rows (default: every row)"
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="optimizer steps per row, warm-up included (default 20)",
    )
    p.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="passes over the rows instead of --max-steps (default: none)",
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=2,
        help="untimed steps at the start of each row (default 2)",
    )
    p.add_argument("--lora-r", type=int, default=8, help="LoRA rank (seed default 8)")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA alpha (seed default 16)")
    p.add_argument(
        "--lora-dropout", type=float, default=0.1, help="LoRA dropout (seed default 0.1)"
    )
    p.add_argument("--lora-targets", default="auto", help="'auto' or comma list of module names")
    p.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (both recipes)")
    p.add_argument(
        "--threads", type=int, default=0, help="CPU threads per row (default: physical cores)"
    )
    p.add_argument(
        "--model-from-config",
        action="store_true",
        help="random weights from config.json (no weights read)",
    )
    p.add_argument("--config-json", help="with --model-from-config: the config.json to build from")
    p.add_argument(
        "--val-rows",
        type=int,
        default=32,
        help="held-out rows for the response val loss (0 = skip)",
    )
    p.add_argument("--seed", type=int, default=42, help="data order and initialisation")
    p.add_argument("--out", help="output folder (default $TUNEDESK_HOME/bench/<timestamp>)")
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds allowed per row (default: no limit)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help=(
            "measure the whole grid this many times in turn; each row reports its median "
            "(default 1)"
        ),
    )
    p.add_argument(
        "--matmul-rate", action="store_true", help="measure the matmul rate and report MFU"
    )
    p.add_argument(
        "--write-docs", action="store_true", help="append the report to docs/benchmarks-log.md"
    )
    p.add_argument(
        "--find-max-batch", action="store_true", help="largest micro-batch that fits (CUDA only)"
    )
    p.add_argument("--_one", help=argparse.SUPPRESS)


def bench_args(args):
    """``BenchArgs`` from the flags; raises ValueError naming every inconsistent one."""
    from bench.training.grid import BenchArgs

    steps = args.max_steps if args.max_steps is not None else (0 if args.epochs is not None else 20)
    b = BenchArgs(
        model=args.model,
        data=args.data,
        max_length=args.max_length,
        max_samples=args.max_samples,
        max_steps=steps,
        epochs=args.epochs or 1.0,
        warmup_steps=args.warmup_steps,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        lora_targets=args.lora_targets,
        learning_rate=args.lr,
        threads=args.threads,
        model_from_config=args.model_from_config,
        config_json=args.config_json,
        val_rows=args.val_rows,
        seed=args.seed,
    )
    problems = []
    if b.warmup_steps < 0:
        problems.append("--warmup-steps must be 0 or more")
    if b.max_steps and b.max_steps <= b.warmup_steps:
        problems.append(
            f"--max-steps {b.max_steps} leaves no timed step after {b.warmup_steps} warm-up steps"
        )
    if b.config_json and not b.model_from_config:
        problems.append("--config-json only applies with --model-from-config")
    if b.config_json and not Path(b.config_json).is_file():
        problems.append(f"--config-json {b.config_json}: no such file")
    if problems:
        raise ValueError("; ".join(problems))
    return b


def _grid(args):
    from bench.training.grid import Grid, parse_list

    return Grid(
        **{
            name: parse_list(getattr(args, flag[2:].replace("-", "_")), kind)
            for flag, name, kind, _, _ in GRID_FLAGS
        }
    )


def command_line(b, grid, rounds: int = 1) -> str:
    """The command that reproduces this benchmark (for the docs heading)."""
    parts = ["python -m bench training"]
    for flag, name, _, _, _ in GRID_FLAGS:
        parts.append(f"{flag} {','.join(map(str, getattr(grid, name)))}")
    parts += [f"--model {b.model}", f"--data {b.data}", f"--max-length {b.max_length}"]
    parts += [f"--max-samples {b.max_samples}"] if b.max_samples else []
    parts += [f"--max-steps {b.max_steps}"] if b.max_steps else [f"--epochs {b.epochs}"]
    parts += [f"--lora-r {b.lora_r} --lora-alpha {b.lora_alpha} --lora-dropout {b.lora_dropout}"]
    parts += [f"--threads {b.threads}"] if b.threads else []
    parts += [f"--rounds {rounds}"] if rounds > 1 else []
    if b.model_from_config:
        parts += ["--model-from-config"] + (
            [f"--config-json {b.config_json}"] if b.config_json else []
        )
    return " ".join(parts)


def _max_batches(b, points) -> int:
    from bench.training.grid import run_config
    from bench.training.maxbatch import find_max_batch

    found = 0
    for p in {(p.device, p.precision, p.quantization, p.recipe): p for p in points}.values():
        label = (
            f"{p.recipe} on {p.device} ({p.precision}, quantization {p.quantization}, max "
            f"length {b.max_length})"
        )
        try:
            model = packing = None
            if b.model_from_config and p.device.startswith("cuda"):
                from bench.training.recipes import load_row_model

                model, packing = load_row_model(b, p, "cuda:0" if p.device == "cuda" else p.device)
            n = find_max_batch(run_config(b, p), p.recipe, model, packing)
        except ValueError as err:
            print(f"{label}: {err}")
            continue
        found += 1
        print(f"{label}: largest micro-batch {n}" if n else f"{label}: not even a batch of 1 fits")
    return 0 if found else 2


def _print_row(i: int, point, result: dict) -> None:
    if "error" in result:
        print(f"[{i + 1}] {point.name}: failed: {result['error']}", flush=True)
    else:
        print(
            f"[{i + 1}] {point.name}: {result['real_tokens_per_s']:,.0f} real tokens/s "
            f"({result['real_tokens']:,} tokens in {result['seconds']:.2f} s)",
            flush=True,
        )


def main(args) -> int:
    from bench.training import grid as bench
    from bench.training import results as bench_report
    from core import paths

    if args._one:  # internal: one row in this fresh process; the result is the last stdout line
        from bench.training.recipes import run_one

        print(json.dumps(run_one(args._one)))
        return 0
    b, grid = bench_args(args), _grid(args)
    points, skipped = bench.expand_grid(b, grid)
    for p, why in skipped:
        print(f"skip {p.name}: {'; '.join(why)}")
    if not points:
        print("error: no combination of the grid can run on this machine (reasons above)")
        return 2
    if args.find_max_batch:
        return _max_batches(b, points)
    out = Path(args.out) if args.out else paths.home() / "bench" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    threads = b.threads or bench.physical_cores()
    before = bench.matmul_rates(points, threads) if args.matmul_rate else {}
    if args.rounds < 1:
        print("error: --rounds must be 1 or more")
        return 2
    rows = bench.run_grid(b, points, on_row=_print_row, timeout=args.timeout, rounds=args.rounds)
    after = bench.matmul_rates(points, threads) if args.matmul_rate else {}
    samples = {d: [r[d] for r in (before, after) if d in r] for d in {**before, **after}}
    rates = {d: max(v) for d, v in samples.items()}  # the ceiling: the best measurement
    recs = bench_report.records(rows, rates)
    settings = (
        f"model {b.model}{' (random weights from config)' if b.model_from_config else ''}, data "
        f"{b.data}, max length {b.max_length}, LoRA r={b.lora_r} alpha={b.lora_alpha} "
        f"dropout={b.lora_dropout}, {b.warmup_steps} warm-up steps untimed"
    )
    report = bench_report.markdown(recs, skipped, rates, settings, samples)
    bench_report.write_csv(recs, out / "results.csv")
    (out / "report.md").write_text(report)
    (out / "results.json").write_text(json.dumps({"args": asdict(b), "rows": recs}, indent=2))
    if any(not r["error"] for r in recs):
        bench_report.plot(recs, out / "throughput.png")
    print("\n" + report + f"\nwritten to {out}")
    if args.write_docs:
        machine = bench_report.machine([p.device for p in points])
        print(
            "appended to "
            f"{bench_report.append_docs(report, command_line(b, grid, args.rounds), machine)}"
        )
    return 0 if any(not r["error"] for r in recs) else 1
