"""`python -m bench eval-engines`: one evaluation answered by PyTorch, then the same one answered
by llama.cpp's llama-server (as Chat serves), in one run: the time of each, their ratio, and
whether the release gate's verdicts agree.

    python -m bench eval-engines          # a quick adapter trained on the demo data, 100 rows
    python -m bench eval-engines --adapter NAME --rows 100 --rows 24

Both evaluations score the same rows (the adapter's held-out rows of ``--data``) with the same
settings as the Evaluate tab's defaults (answers as long as the references, golden prompts,
sliced by intent, 8 prompts per PyTorch call); neither saves a report or a verdict. The model
and the adapters are loaded before either clock starts; the GGUF files are converted before too
(Chat converts them once, when llama-server first serves), and that time is printed apart.
Without ``--adapter``, an adapter is trained first for ``--steps`` steps on ``--data``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo_support.jsonl"
ENGINES = ("pytorch", "llama.cpp")


def train_quick(data: str, model: str, steps: int, name: str) -> str:
    """An adapter trained ``steps`` steps on the Train tab's data settings; its name."""
    from finetune.config import RunConfig
    from finetune.train import train

    cfg = RunConfig()
    cfg.model.name = model
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = data, 400, 256
    t = cfg.train
    t.max_steps, t.batch_size, t.learning_rate = steps, 8, 2e-3
    t.eval_every, t.probe_every, t.save_every, t.log_every = 0, 0, 0, 10
    cfg.run.adapter_name = name
    train(cfg)
    return name


def convert_ggufs(session, adapter: str) -> float:
    """Seconds to convert (or find) the base and LoRA GGUFs llama-server serves."""
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf

    start = time.perf_counter()
    home = session.adapter_folder(adapter).parent.parent
    ensure_base_gguf(session.resolved, "q8_0", home=home)
    ensure_lora_gguf(adapter, home=home)
    return time.perf_counter() - start


def one(session, adapter: str, data: str, rows: int, engine: str, golden: str | None) -> dict:
    """One evaluation's wall-clock seconds, engine, verdict and headline figures."""
    from eval.run import evaluate

    start = time.perf_counter()
    report = evaluate(
        session,
        [adapter],
        data,
        max_samples=rows,
        slice_by="intent",
        save=False,
        engine=engine,
        golden=golden,
    )
    seconds = time.perf_counter() - start
    right = {}
    for model, found in (report.support.get("models") or {}).items():
        r = found.get("right_intent")
        right[model] = f"{r['right']}/{r['rows']}" if r else "skipped"
    return {
        "engine": report.settings["engine"],
        "seconds": round(seconds, 1),
        "rows": report.data["rows"],
        "timings": report.timings,
        "verdict": report.gate[adapter]["state"],
        "right_intent": right,
        "bleu": {m: round(v["bleu"], 2) for m, v in report.metrics.items()},
        "rouge_l": {m: round(v["rouge_l"], 4) for m, v in report.metrics.items()},
    }


def run(args, on_line=print) -> dict:
    """Both evaluations for each of ``args.rows``; each run's lines printed as it ends."""
    from inference.session import ModelSession

    adapter = args.adapter or train_quick(args.data, args.model, args.steps, "eval-engines-quick")
    session = ModelSession(args.model)
    session.load()
    session.load_adapter(adapter)
    result = {
        "adapter": adapter,
        "data": args.data,
        "model": args.model,
        "gguf_seconds": round(convert_ggufs(session, adapter), 1),
        "runs": [],
    }
    on_line(
        f"adapter {adapter} on {args.model}; GGUFs converted or found before the clocks: "
        f"{result['gguf_seconds']} s"
    )
    for rows in args.rows:
        both = {}
        for engine in ENGINES:
            both[engine] = one(
                session,
                adapter,
                args.data,
                rows,
                engine,
                None if args.no_golden else str(REPO / "assets" / "golden.jsonl"),
            )
            on_line(
                f"  ({rows} rows, {both[engine]['engine']['label']}: {both[engine]['seconds']} s, "
                f"gate {both[engine]['verdict']})"
            )
        torch_s, llama_s = both["pytorch"]["seconds"], both["llama.cpp"]["seconds"]
        result["runs"].append(
            {
                "rows": rows,
                **both,
                "ratio": round(llama_s / torch_s, 3),
                "same_verdict": both["pytorch"]["verdict"] == both["llama.cpp"]["verdict"],
            }
        )
        for line in run_lines(result["runs"][-1], args.data):
            on_line(line)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return result


def run_lines(r: dict, data: str) -> list[str]:
    """One run's figures: each engine's time and verdict, the ratio."""
    lines = [
        f"{r['rows']} rows of {Path(data).name} ({r['pytorch']['rows']} scored), same rows "
        "and settings:"
    ]
    for engine in ENGINES:
        e, t = r[engine], r[engine]["timings"]
        lines.append(
            f"  {e['engine']['label']:<28} {e['seconds']:>8.1f} s (answers "
            f"{t['generate_seconds'] + t['golden_seconds']:.1f} s, engine start "
            f"{t['engine_start_seconds']:.1f} s, perplexity {t['perplexity_seconds']:.1f} s); "
            f"gate {e['verdict']}; right intent {e['right_intent']}; BLEU {e['bleu']}"
        )
    lines.append(f"  llama.cpp / PyTorch time: {r['ratio']:.3f}; same verdict: {r['same_verdict']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench eval-engines", description=__doc__.splitlines()[0]
    )
    p.add_argument("--data", default=str(DEMO), help="dataset (default: the demo data)")
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct", help="base model")
    p.add_argument("--adapter", help="an adapter on the shelf (default: train one first)")
    p.add_argument("--steps", type=int, default=20, help="steps of the quick adapter (default 20)")
    p.add_argument(
        "--rows", type=int, action="append", help="rows per evaluation (repeat; default 100)"
    )
    p.add_argument("--no-golden", action="store_true", help="leave out the golden prompts")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args(argv)
    args.rows = args.rows or [100]
    try:
        result = run(args, on_line=lambda line: print(line, flush=True))
    except (ValueError, OSError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0 if all(r["same_verdict"] for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
