"""`python -m bench gate-demo`: a good adapter passes its release gate, a damaged one fails.

Both adapters train on the same rows with the same settings; the damaged one's responses are
shuffled among the rows, so it answers fluently but about something else. One evaluation
then scores the base and both adapters on held-out rows of the same file, sliced by intent
(``rows_per_slice`` of each), with golden prompts, and checks each adapter's default gate.

    python -m bench gate-demo          # Bitext (../shared/datasets/bitext), the default model
    python -m bench gate-demo --steps 40 --rows-per-slice 5 --max-new-tokens 40

The data file must have an ``intent`` column; training uses its first ``train_rows`` rows,
evaluation the rows after them (never the same rows). Working files go to
``$TUNEDESK_HOME/datasets/gate-demo/``; ``result.json`` there holds the figures. Exit status 0 when
the good adapter passed and the damaged one failed, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BITEXT = REPO.parent / "shared" / "datasets" / "bitext" / "bitext_v1_train.csv"
GOLDEN = REPO / "assets" / "gate_demo_golden.jsonl"


@dataclass
class DemoArgs:
    """What the demo trains and evaluates."""

    data: str = str(BITEXT)  # a file with prompt/response columns and an intent column
    model: str = "default"  # base model
    train_rows: int = 1200  # the first rows of the file train both adapters
    steps: int = 60  # optimizer steps per adapter
    batch_size: int = 8
    learning_rate: float = 1e-3
    lora_r: int = 16
    max_length: int = 256
    rows_per_slice: int = 5  # evaluation rows per intent (after the training rows)
    max_new_tokens: int = 48  # answer length in the evaluation
    golden: str = str(GOLDEN)
    seed: int = 0
    prefix: str = "gate-demo"  # adapters are <prefix>-good and <prefix>-damaged
    # Gate rules both adapters get instead of the defaults, "RULE=VALUE;RULE=VALUE" as in
    # `python -m adapters gate --set` (e.g. "golden_all_pass=true"); empty: the defaults.
    rules: str = ""


def rule_overrides(text: str) -> dict:
    """``"a=1;b=x,y"`` as checked gate rules over the defaults (GateRulesError if bad)."""
    from adapters.shelf.gate_rules import DEFAULT_RULES, check_rules, parse_setting

    pairs = [parse_setting(part) for part in text.split(";") if part.strip()]
    floors = {
        k: v for key, value in pairs if key == "floors" for k, v in value.items()
    }  # they add up
    return check_rules(
        {**DEFAULT_RULES, **dict(pairs), "floors": {**DEFAULT_RULES["floors"], **floors}}
    )


def write_splits(args: DemoArgs, folder: Path) -> dict:
    """train.jsonl, train_shuffled.jsonl (responses permuted) and eval.jsonl in ``folder``."""
    from finetune.config import DataArgs
    from finetune.data import detect_mapping, load_rows

    ds = load_rows(args.data)
    mapping = detect_mapping(ds.column_names, DataArgs(path=args.data))
    if mapping.prompt is None or not mapping.intent:
        raise ValueError(
            f"{Path(args.data).name} needs prompt/response columns and an intent column"
        )
    cols = ds.select_columns([mapping.prompt, mapping.response, mapping.intent]).to_dict()
    rows = [
        {"prompt": p, "response": r, "intent": i}
        for p, r, i in zip(
            cols[mapping.prompt], cols[mapping.response], cols[mapping.intent], strict=True
        )
    ]
    if len(rows) <= args.train_rows:
        raise ValueError(
            f"{Path(args.data).name} has {len(rows)} rows; train_rows={args.train_rows} "
            "leaves none to evaluate"
        )
    train, held_out = rows[: args.train_rows], rows[args.train_rows :]
    responses = [r["response"] for r in train]
    random.Random(args.seed).shuffle(responses)
    shuffled = [{**r, "response": resp} for r, resp in zip(train, responses, strict=True)]
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": train, "train_shuffled": shuffled, "eval": held_out}
    for name, part in files.items():
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
    moved = sum(a["response"] != b["response"] for a, b in zip(train, shuffled, strict=True))
    return {"paths": {k: str(folder / f"{k}.jsonl") for k in files}, "shuffled_rows": moved}


def train_adapter(args: DemoArgs, data: str, name: str) -> dict:
    """Train one adapter in this process; returns its name, seconds and final metrics."""
    from finetune.config import RunConfig
    from finetune.train import train

    cfg = RunConfig()
    cfg.model.name = args.model
    cfg.data.path, cfg.data.max_length, cfg.data.val_fraction = data, args.max_length, 0.02
    cfg.lora.r, cfg.lora.alpha = args.lora_r, 2 * args.lora_r
    t = cfg.train
    t.max_steps, t.batch_size, t.learning_rate, t.seed = (
        args.steps,
        args.batch_size,
        args.learning_rate,
        args.seed,
    )
    t.eval_every, t.probe_every, t.save_every, t.log_every = 0, 0, 0, 10
    cfg.run.adapter_name = name
    start = time.perf_counter()
    result = train(cfg)
    return {
        "name": name,
        "seconds": round(time.perf_counter() - start, 1),
        "metrics": getattr(result, "metrics", {}),
    }


def run_demo(args: DemoArgs, on_line=print) -> dict:
    """Train both adapters, evaluate them by intent, check their gates; the figures as a dict."""
    from adapters.shelf.gate_rules import write_rules
    from adapters.shelf.store import Shelf
    from core import paths
    from eval.run import evaluate
    from inference.generate import GenerationSettings
    from inference.session import ModelSession

    rules = rule_overrides(args.rules) if args.rules else None  # bad rules: before any training
    folder = paths.subdir("datasets") / "gate-demo"
    splits = write_splits(args, folder)
    shelf = Shelf()
    trained = {}
    for kind, data in (("good", "train"), ("damaged", "train_shuffled")):
        name = f"{args.prefix}-{kind}"
        if (shelf.root / name).exists():
            shelf.delete(name)
        on_line(f"training {name} on {Path(splits['paths'][data]).name} ({args.steps} steps)")
        trained[kind] = train_adapter(args, splits["paths"][data], name)
    names = [trained["good"]["name"], trained["damaged"]["name"]]
    for name in names if rules else []:
        write_rules(shelf.path(name), rules)
    session = ModelSession(args.model, dtype="float32")
    on_line(f"evaluating base, {names[0]} and {names[1]} by intent")
    report = evaluate(
        session,
        names,
        splits["paths"]["eval"],
        max_samples=10_000,
        batch_size=8,
        use_validation_split=False,
        seed=args.seed,
        settings=GenerationSettings(max_new_tokens=args.max_new_tokens, seed=args.seed),
        golden=args.golden,
        slice_by="intent",
        rows_per_slice=args.rows_per_slice,
    )
    result = {
        "args": asdict(args),
        "rules": rules or "defaults",
        "shuffled_rows": splits["shuffled_rows"],
        "trained": trained,
        "eval_id": report.eval_id,
        "report": report.folder,
        "rows": report.data["rows"],
        "slices": len(report.slices["slices"]),
        "timings": report.timings,
        "metrics": report.metrics,
        "deltas": report.deltas,
        "gate": report.gate,
        "worse_slices": {
            a: [s["slice"] for s in report.slices["slices"] if s["worse"][a]] for a in names
        },
    }
    result["ok"] = (
        report.gate[names[0]]["state"] == "passed" and report.gate[names[1]]["state"] == "failed"
    )
    (folder / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench gate-demo", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    defaults = DemoArgs()
    for key, value in asdict(defaults).items():
        p.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    args = DemoArgs(**vars(p.parse_args(argv)))
    if not Path(args.data).is_file():
        print(f"error: data file {args.data} does not exist", file=sys.stderr)
        return 2
    try:
        result = run_demo(args)
    except (ValueError, OSError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    for name, verdict in result["gate"].items():
        m, d = result["metrics"][name], result["deltas"][name]
        print(
            f"{name}: gate {verdict['state']}; BLEU {m['bleu']:.2f} (Δ {d['bleu']['delta']:+.2f}), "
            f"ROUGE-L {m['rouge_l']:.4f}, perplexity {m['perplexity']:.2f}, golden "
            f"{m['golden_passed']}/{m['golden_total']}, {len(result['worse_slices'][name])} of "
            f"{result['slices']} intents worse beyond chance (corrected)"
        )
        for reason in verdict["reasons"]:
            print(f"  - {reason}")
    print(f"report: {result['report']}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
