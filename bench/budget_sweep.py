"""``python -m bench budget-sweep``: which recipe a time budget should train, by measurement.

Each variant is the Train tab's defaults (``finetune.config.first_run_defaults``: the time
budget, batch auto (8 on a CPU in the sweep's fresh home), lr 2e-3, r=16 on all seven
projections, max length 256, 5 % validation, cadence auto) with one thing changed, trained for
``--minutes`` on the training file's first ``--rows`` rows (as ``python -m bench preference``
trains its SFT adapter), then scored by the response perplexity of the base model and every
variant on the *same* ``--score-rows`` rows: the ones right after the training rows, never
trained on by any variant and never the rows the held-out benchmarks score (the file's last
rows). A sweep chooses on training rows; the held-out rows stay for the check of the one
chosen.

    python -m bench budget-sweep --minutes 3                       # every variant
    python -m bench budget-sweep --minutes 3 --variants default,lr-1e-3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

from bench.preference import write_rows
from bench.preference_args import BITEXT
from bench.preference_pairs import read_rows
from finetune.config import first_run_defaults

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
VARIANTS = {  # name -> (what changes, how)
    "default": ("the Train tab's defaults", lambda cfg: None),
    "lr-5e-4": ("learning rate 5e-4", lambda cfg: setattr(cfg.train, "learning_rate", 5e-4)),
    "lr-1e-3": (
        "learning rate 1e-3 (the default before this sweep)",
        lambda cfg: setattr(cfg.train, "learning_rate", 1e-3),
    ),
    "lr-4e-3": ("learning rate 4e-3", lambda cfg: setattr(cfg.train, "learning_rate", 4e-3)),
    "r8-attention": (
        "r=8, alpha 16, attention projections only",
        lambda cfg: _set(cfg.lora, r=8, alpha=16, target_modules=list(ATTENTION)),
    ),
    "r32": ("r=32, alpha 64", lambda cfg: _set(cfg.lora, r=32, alpha=64)),
    "length-384": (
        "max length 384 (256: long answers cut)",
        lambda cfg: setattr(cfg.data, "max_length", 384),
    ),
    "packing": (
        "rows packed into full-length sequences",
        lambda cfg: setattr(cfg.data, "packing", True),
    ),
    "batch-6": ("batch 6 (auto: 8)", lambda cfg: setattr(cfg.train, "batch_size", 6)),
    "batch-4": ("batch 4 (auto: 8)", lambda cfg: setattr(cfg.train, "batch_size", 4)),
    "validation-2pct": (
        "2 % of the rows for validation (5 %)",
        lambda cfg: setattr(cfg.data, "val_fraction", 0.02),
    ),
}


def _set(obj, **values) -> None:
    for k, v in values.items():
        setattr(obj, k, v)


def variant_config(name: str, rows_csv: Path, rows: int, minutes: float, model: str = "default"):
    """The run config of variant ``name`` on ``rows_csv`` (its adapter is named
    ``sweep-<name>``)."""
    cfg = first_run_defaults()
    cfg.model.name = model
    cfg.train.time_budget_s = minutes * 60
    cfg.data.path, cfg.data.max_samples = str(rows_csv), rows
    cfg.run.adapter_name = f"sweep-{name}"
    VARIANTS[name][1](cfg)
    return cfg


def warm_up(rows_csv: Path, rows: int, model: str) -> None:
    """Two steps of the default variant, thrown away: the first run in a process pays what the
    later ones find done (imports, the rows' tokenization cache, the first products' kernel
    set-up) and bought 24 steps in 3 minutes where the same settings bought ~30 after another
    run (docs/benchmarks.md); every variant now starts as warm as the next."""
    from adapters.shelf.store import Shelf
    from finetune.train import train

    cfg = variant_config("default", rows_csv, rows, 1, model)
    cfg.train.time_budget_s, cfg.train.max_steps = 0, 2
    cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = 0
    cfg.run.adapter_name = "sweep-warm-up"
    train(cfg)
    Shelf().delete("sweep-warm-up")


def score(adapters: list[str | None], score_csv: Path, rows: int, model: str = "default") -> dict:
    """Response perplexity of each adapter (None: the base model) on the same rows."""
    from eval.run import row_nll
    from eval.scoring_rows import select_rows
    from inference.session import ModelSession

    session = ModelSession(model, dtype="float32")
    picked = select_rows(session.tokenizer, {}, str(score_csv), rows, use_validation_split=False)
    out = {}
    for adapter in adapters:
        nll = row_nll(session, adapter, picked.examples)
        out[adapter or "base"] = math.exp(float(nll["nll"].sum()) / float(nll["tokens"].sum()))
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench budget-sweep", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument("--data", default=str(BITEXT), help="Bitext training CSV")
    p.add_argument(
        "--minutes", type=float, default=3.0, help="time budget of each variant (default 3)"
    )
    p.add_argument(
        "--rows", type=int, default=1000, help="train on the file's first N rows (default 1000)"
    )
    p.add_argument(
        "--score-rows", type=int, default=200, help="score on the N rows after them (default 200)"
    )
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma list of: {', '.join(VARIANTS)}"
    )
    p.add_argument("--model", default="default", help="base model (default: SmolLM2-135M-Instruct)")
    p.add_argument(
        "--home", help="TuneDesk home for the adapters (default: a fresh temporary folder)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    data = Path(args.data)
    if unknown or not names:
        print(
            f"error: unknown variant(s) {', '.join(unknown) or '(none given)'}: choose from "
            f"{', '.join(VARIANTS)}"
        )
        return 2
    if not data.is_file():
        print(f"error: {data}: no such file (the Bitext CSV lives in ../shared/datasets/bitext/)")
        return 2
    if args.minutes <= 0 or args.rows < 20 or args.score_rows < 1:
        print("error: --minutes must be above 0, --rows 20 or more, --score-rows 1 or more")
        return 2
    home = Path(args.home or tempfile.mkdtemp(prefix="tunedesk-sweep-"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ["TUNEDESK_HOME"] = str(home)
    all_rows, fields = read_rows(data)
    if len(all_rows) < args.rows + args.score_rows:
        print(f"error: {data.name} has {len(all_rows)} rows, fewer than --rows + --score-rows")
        return 2
    train_csv = write_rows(home / "sweep-train.csv", fields, all_rows[: args.rows])
    score_csv = write_rows(
        home / "sweep-score.csv", fields, all_rows[args.rows : args.rows + args.score_rows]
    )

    from finetune.train import train

    warm_up(train_csv, args.rows, args.model)
    runs = {}
    for name in names:
        start = time.perf_counter()
        result = train(
            variant_config(name, train_csv, args.rows, args.minutes, args.model),
            started=time.time(),
        )
        manifest = json.loads((Path(result.adapter_dir) / "manifest.json").read_text())
        budget = manifest.get("budget") or {}
        runs[name] = {
            "seconds": time.perf_counter() - start,
            "steps": result.steps,
            "rows_seen": budget.get("rows_seen"),
            "val_ppl": result.metrics.get("val_perplexity"),
        }
        print(f"{name}: {runs[name]}", flush=True)
    ppl = score([None] + [f"sweep-{n}" for n in names], score_csv, args.score_rows, args.model)
    print(report(names, runs, ppl, args))
    return 0


def report(names: list[str], runs: dict, ppl: dict, args) -> str:
    """The sweep's markdown table, best perplexity first."""
    lines = [
        f"{args.minutes:g}-minute budget on the first {args.rows} rows of "
        f"`{Path(args.data).name}`; perplexity on the {args.score_rows} rows after them (never "
        f"trained on); base model {ppl['base']:.2f}",
        "",
        "| variant | change | steps | rows seen | whole run | own validation ppl | perplexity on "
        "the sweep's rows |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(names, key=lambda n: ppl[f"sweep-{n}"]):
        r = runs[name]
        own = f"{r['val_ppl']:.2f}" if isinstance(r["val_ppl"], (int, float)) else "—"
        lines.append(
            f"| {name} | {VARIANTS[name][0]} | {r['steps']} | {r['rows_seen'] or '—'} | "
            f"{r['seconds']:.0f} s | {own} | {ppl[f'sweep-{name}']:.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
