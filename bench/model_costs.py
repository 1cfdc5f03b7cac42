"""`python -m bench model-costs`: what each recommended model costs on this machine.

For every model of ``core.model_catalog`` (or those named with ``--models``), with random weights
of its real shape: training real tokens/s and peak memory with the Train tab's settings, in
TuneDesk's recipe beside the seed recipe (``bench.training``'s rows: each in its own process, a
few timed steps after an untimed warm-up), then llama-server's decode tokens/s for one client at
Q8_0 (``bench.model_costs_serving``). A row that fails (memory, the converter) keeps its reason
and the others go on. Writes the table the Train tab's Check quotes (``--table``, default
assets/model_costs.json) and prints it as markdown.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from core import model_catalog, model_costs


def add_arguments(p) -> None:
    p.add_argument(
        "--models",
        default="all",
        help="comma list of Hub ids or names from the catalog (default all)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=3,
        help="optimizer steps per training row, warm-up included",
    )
    p.add_argument(
        "--warmup-steps", type=int, default=1, help="untimed steps at the start of each row"
    )
    p.add_argument(
        "--max-samples", type=int, default=200, help="rows of the data to prepare (default 200)"
    )
    p.add_argument("--tokens", type=int, default=64, help="tokens per decode request")
    p.add_argument(
        "--runs", type=int, default=3, help="decode requests per model, the first not counted"
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per training row")
    p.add_argument("--skip-serving", action="store_true", help="training rows only")
    p.add_argument("--table", type=Path, default=model_costs.TABLE, help="where to write the table")
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the other models' rows of the table there when it was measured on this machine",
    )


def selected(text: str) -> list[model_catalog.CatalogModel]:
    """The catalog entries ``--models`` names; ValueError naming any it does not know."""
    if text.strip().lower() == "all":
        return list(model_catalog.CATALOG)
    picked, unknown = [], []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        model = model_catalog.find(item)
        (picked if model else unknown).append(model or item)
    if unknown or not picked:
        known = ", ".join(m.hub_id for m in model_catalog.CATALOG)
        raise ValueError(
            f"not in the catalog: {', '.join(unknown) or 'nothing named'}; choose from {known}"
        )
    return picked


def train_settings() -> dict:
    """The Train tab's settings (``first_run_defaults``) the rows train with."""
    from finetune.config import first_run_defaults, micro_batch

    cfg = first_run_defaults()
    t, lo = cfg.train, cfg.lora
    return {
        "batch_size": micro_batch(t),  # "auto" is this on the CPU, where the rows are measured
        "grad_accum": t.grad_accum,
        "max_length": cfg.data.max_length,
        "precision": t.precision,
        "lora_r": lo.r,
        "lora_alpha": lo.alpha,
        "lora_dropout": lo.dropout,
        "learning_rate": t.learning_rate,
        "data": "assets/demo_support.jsonl",
    }


def training_costs(config_json: Path, s: dict, args) -> dict:
    """Both recipes' rows for one model: ``{"tunedesk": {...}, "seed": {...}}`` plus errors."""
    from bench.training.grid import BenchArgs, Point, run_grid

    b = BenchArgs(
        model="default",
        data=s["data"],
        max_length=s["max_length"],
        max_samples=args.max_samples,
        max_steps=args.max_steps,
        warmup_steps=args.warmup_steps,
        lora_r=s["lora_r"],
        lora_alpha=s["lora_alpha"],
        lora_dropout=s["lora_dropout"],
        learning_rate=s["learning_rate"],
        model_from_config=True,
        config_json=str(config_json),
        val_rows=0,
    )
    points = [
        Point("cpu", s["batch_size"], s["grad_accum"], s["precision"], "none", r)
        for r in ("tunedesk", "seed")
    ]
    out, errors = {}, {}
    for point, row in zip(points, run_grid(b, points, timeout=args.timeout), strict=True):
        if "error" in row:
            errors[point.recipe] = row["error"]
            continue
        out[point.recipe] = {
            "tokens_per_s": row["real_tokens_per_s"],
            "peak_memory_gib": row["peak_memory_gib"],
            "timed_steps": row["timed_steps"],
            "seconds": row["seconds"],
            "real_tokens": row["real_tokens"],
        }
        if point.recipe == "tunedesk":
            out["tokens_per_example"] = row["real_tokens"] / max(row["examples"], 1)
    return {"training": out, "errors": errors}


def measure_model(model, s: dict, args, work: Path) -> dict:
    """One model's row of the table (training, serving, errors), printed as it finishes."""
    from bench.model_costs_serving import serving_cost

    folder = work / model.hub_id.replace("/", "--")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(model_catalog.config_dict(model)))
    t0 = time.perf_counter()
    row = {
        "name": model.name,
        "family": model.family,
        "params": model.params,
        **training_costs(folder / "config.json", s, args),
    }
    if not args.skip_serving:
        serving = serving_cost(model_catalog.config_dict(model), folder, args.tokens, args.runs)
        if "error" in serving:
            row["errors"]["serving"] = serving.pop("error")
        row["serving"] = serving
    # On a shared machine another process on the cores slows every row: the 1-minute load
    # average (this row's own threads count ~2 of it) says whether one did.
    row["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    print(f"{model.name}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return row


def main(args) -> int:
    models = selected(args.models)
    if args.warmup_steps < 0 or args.max_steps <= args.warmup_steps:
        raise ValueError(
            f"--max-steps {args.max_steps} leaves no timed step after {args.warmup_steps} "
            "warm-up steps"
        )
    s = train_settings()
    machine = model_costs.machine_info()
    print(f"machine: {model_costs.describe_machine(machine)}; settings: {s}", flush=True)
    table = {
        "machine": machine,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m bench model-costs " + shlex.join(sys.argv[2:]),
        "settings": s,
        "steps": {
            "max_steps": args.max_steps,
            "warmup_steps": args.warmup_steps,
            "decode_tokens": args.tokens,
            "decode_runs": args.runs,
        },
        "models": {},
    }
    earlier = model_costs.read(args.table) if args.merge else None
    if earlier and model_costs.same_machine(earlier["machine"], machine):
        table["models"] = dict(earlier["models"])  # a row is replaced once its model is measured
    with tempfile.TemporaryDirectory(prefix="tunedesk-model-costs-") as tmp:
        for m in models:  # written after each model: a run cut short keeps the rows it finished
            row = measure_model(m, s, args, Path(tmp))
            table["models"][m.hub_id] = {**row, "date": table["date"], "command": table["command"]}
            path = model_costs.write(table, args.table)
    print("\n" + model_costs.markdown(table) + f"\n\nwritten to {path}")
    rows = table["models"].values()
    return 0 if any(r.get("training") or r.get("serving") for r in rows) else 1
