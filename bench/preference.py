"""``python -m bench preference``: DPO (or ORPO) on Bitext preference pairs, on top of an SFT
adapter trained with the Train tab's defaults; preference accuracy on held-out pairs before and
after, and the minutes it took.

Pairs come from the Bitext training rows (``../shared/datasets/bitext/bitext_v1_train.csv``):
the prompt is a row's instruction, ``chosen`` its own reference answer, ``rejected`` the answer
of a row with another intent. The SFT adapter trains on the file's first ``--sft-rows`` rows;
the training pairs come from the rows after them, the ``--held-out`` pairs from the file's last
rows (the same rows whatever ``--pairs`` is).
Preference accuracy is the share of held-out pairs where the adapter gives the chosen answer
the higher log-probability (``finetune.train.preference.preference_accuracy``).

    python -m bench preference                         # 128 pairs, 200 held out, DPO, then the gate
    python -m bench preference --pairs 64 --held-out 100 --method orpo
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BITEXT = REPO.parent / "shared" / "datasets" / "bitext" / "bitext_v1_train.csv"


def bitext_pairs(path: Path, skip: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` pairs from the rows after the first ``skip`` (negative: the file's last
    ``-skip`` rows): chosen = the row's answer, rejected = the answer of a row (anywhere in the
    file) with another intent."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("instruction") and r.get("response")]
    rng = random.Random(seed)
    pool = rows[skip:skip + count] if skip >= 0 else rows[skip:][:count]
    if len(pool) < count:
        raise ValueError(f"{path.name} has {len(rows)} rows; {skip} + {count} are needed")
    pairs = []
    for row in pool:
        other = rng.choice(rows)
        while other["intent"] == row["intent"]:
            other = rng.choice(rows)
        pairs.append({"prompt": [{"role": "user", "content": row["instruction"]}], "chosen": row["response"],
                      "rejected": other["response"], "intent": row["intent"]})
    return pairs


def train_sft(data: Path, rows: int, steps: int, name: str) -> float:
    """The Train tab's defaults on the first ``rows`` rows; returns the seconds it took."""
    from finetune.config import RunConfig
    from finetune.train import train

    cfg = RunConfig()
    cfg.data.path, cfg.data.max_samples = str(data), rows
    cfg.train.max_steps = steps
    cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = 0
    cfg.run.adapter_name = name
    start = time.perf_counter()
    train(cfg)
    return time.perf_counter() - start


def accuracy(adapter: str, pairs: list[dict]) -> tuple[float, float, float]:
    from finetune.train.preference import load_policy, preference_accuracy

    model, tokenizer, _ = load_policy(adapter, trainable=False)
    return preference_accuracy(model, tokenizer, pairs)


def release_gate(child: str, data: Path, last_rows: int, per_intent: int, max_new_tokens: int, home: Path):
    """The release gate of ``child`` against the version it was tuned from (``eval.run`` scores
    the parent beside it), on the file's last ``last_rows`` rows (never trained on), sliced by
    intent, ``per_intent`` rows each. Returns the report."""
    from eval.run import evaluate
    from inference.generate import GenerationSettings
    from inference.session import ModelSession

    with open(data, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), reader.fieldnames
    held = home / "gate-rows.csv"
    with open(held, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows[-last_rows:])
    session = ModelSession("default", dtype="float32")
    return evaluate(session, [child], str(held), max_samples=min(500, last_rows), use_validation_split=False,
                    slice_by="intent", rows_per_slice=per_intent,
                    settings=GenerationSettings(max_new_tokens=max_new_tokens))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench preference", description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(BITEXT), help="Bitext training CSV")
    p.add_argument("--method", choices=["dpo", "orpo"], default="dpo")
    p.add_argument("--sft-rows", type=int, default=400, help="rows the SFT adapter trains on (Train tab: 400)")
    p.add_argument("--sft-steps", type=int, default=30, help="its optimizer steps (Train tab: 30)")
    p.add_argument("--pairs", type=int, default=128, help="pairs the preference run trains on")
    p.add_argument("--held-out", type=int, default=200, help="pairs kept out for the accuracy")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--beta", type=float, default=0.02)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--sft-weight", type=float, default=1.0, help="DPO: weight of the SFT term on chosen answers")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass (TRL's default; off here as in SFT)")
    p.add_argument("--home", help="keep the working files here (default: a temporary folder)")
    p.add_argument("--gate", type=int, default=3, metavar="ROWS",
                   help="then the release gate against the starting version on the held-out rows, this many "
                        "per intent (0: no gate)")
    p.add_argument("--gate-tokens", type=int, default=48, help="answer length in the gate's evaluation")
    args = p.parse_args(argv)
    data = Path(args.data)
    if not data.is_file():
        raise ValueError(f"{data} is not there; the Bitext files live in ../shared/datasets/bitext/")
    from finetune.train.preference import PreferenceConfig, train_preference

    with tempfile.TemporaryDirectory(prefix="tunedesk-pref-") as tmp:
        home = Path(args.home or tmp)
        os.environ["TUNEDESK_HOME"] = str(home)
        train_pairs = bitext_pairs(data, args.sft_rows, args.pairs)
        if args.sft_rows + args.pairs > 4000 - args.held_out:
            raise ValueError("--sft-rows + --pairs + --held-out must fit in the file's 4,000 rows")
        held_out = bitext_pairs(data, -args.held_out, args.held_out, seed=1)
        pairs_file = home / "pairs.jsonl"
        pairs_file.parent.mkdir(parents=True, exist_ok=True)
        pairs_file.write_text("".join(json.dumps(x) + "\n" for x in train_pairs))
        reused = (home / "adapters" / "bench-sft").is_dir()  # a --home kept from an earlier run
        sft_seconds = 0.0 if reused else train_sft(data, args.sft_rows, args.sft_steps, "bench-sft")
        before = accuracy("bench-sft", held_out)
        cfg = PreferenceConfig("bench-sft", str(pairs_file), name=f"bench-{args.method}", method=args.method,
                               beta=args.beta, learning_rate=args.lr, epochs=args.epochs,
                               batch_size=args.batch_size, max_length=args.max_length, sft_weight=args.sft_weight,
                               gradient_checkpointing=args.gradient_checkpointing)
        shutil.rmtree(home / "adapters" / cfg.name, ignore_errors=True)  # the last run's, in a kept --home
        result = train_preference(cfg)
        after = accuracy(result.name, held_out)
        started = time.perf_counter()
        report = release_gate(result.name, data, args.held_out, args.gate, args.gate_tokens, home) if args.gate else None
        gate_minutes = (time.perf_counter() - started) / 60
    lines = [f"## Preference tuning on Bitext pairs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"- command: `python -m bench preference {' '.join(argv or [])}`",
             f"- SFT adapter: the Train tab's defaults ({args.sft_rows} rows, {args.sft_steps} steps), "
             + ("reused from --home" if reused else f"{sft_seconds / 60:.1f} min"),
             f"- {args.method.upper()}: {result.pairs} pairs, {result.steps} steps, batch {args.batch_size}, "
             f"lr {args.lr}, beta {args.beta}, max length {args.max_length}"
             + (f", SFT term weight {args.sft_weight}" if args.method == "dpo" else "") + f": {result.seconds / 60:.1f} min",
             "", "| adapter | held-out preference accuracy | mean log-prob margin | perplexity of the chosen answers |",
             "|---|---|---|---|",
             f"| SFT (start) | {before[0]:.3f} | {before[1]:.1f} | {before[2]:.2f} |",
             f"| after {args.method.upper()} | {after[0]:.3f} | {after[1]:.1f} | {after[2]:.2f} |", ""]
    if report is not None:
        from eval.gate import gate_lines

        verdict = report.gate[result.name]
        lines += [f"Release gate against the starting version ({report.data['rows']} held-out rows, "
                  f"{args.gate} per intent, answers of {args.gate_tokens} tokens, {gate_minutes:.1f} min): "
                  f"**{verdict['state']}**", "", *(f"- {line}" for line in gate_lines(report)),
                  *(f"- _{note}_" for note in verdict["notes"]), "",
                  "| model | BLEU | ROUGE-L | perplexity |", "|---|---|---|---|",
                  *(f"| {m} | {report.metrics[m]['bleu']:.2f} | {report.metrics[m]['rouge_l']:.3f} | "
                    f"{report.metrics[m]['perplexity']:.2f} |" for m in report.models), ""]
    print("\n".join(lines))
    return 0
