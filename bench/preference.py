"""``python -m bench preference``: DPO (or ORPO) on Bitext preference pairs over an SFT adapter.

The SFT adapter trains as the Train tab trains it; the report gives the preference accuracy on
held-out pairs before and after, the minutes each part took, then the release gate of the new
version against the SFT adapter.

Pairs come from the Bitext training rows (``../shared/datasets/bitext/bitext_v1_train.csv``,
``bench/preference_pairs.py``): the prompt is a row's instruction, ``chosen`` its own reference
answer, ``rejected`` the answer of a row with another intent (``--rejected other-intent``) or
the base model's own greedy answer (``--rejected base``: generated in batches, at most
``--rejected-tokens`` each, cached in the bench home as ``base-answers.jsonl``; a row whose base
answer is empty or the reference is left out).
Rows: the SFT adapter trains on the file's first ``--sft-rows`` rows (written to
``sft-rows.csv`` in the bench home; the run's shuffle and 5 % validation split stay inside
them); the training pairs come from the rows after them, the ``--held-out`` pairs from the file's
last rows and the gate's rows from its last ``--gate-from`` rows (the same rows whatever
``--pairs`` is). The SFT adapter's held-out accuracy is cached in the home.
SFT: with ``--sft-budget MINUTES`` (default 10) the Train tab's defaults
(``finetune.config.first_run_defaults``, as ``ui_defaults``: a time budget that sizes the steps,
evaluation, probes and checkpoints on auto); with ``--sft-budget 0`` the settings before the time
budget, ``--sft-steps`` fixed steps. A ``--home`` kept from an earlier run reuses its SFT adapter
and base answers; the report says how that adapter was trained (its manifest). Preference accuracy
is the share of held-out pairs where the adapter gives the chosen answer the higher log-probability
(``finetune.train.preference_accuracy``).

    python -m bench preference                         # 128 pairs, 200 held out, DPO, then the gate
    python -m bench preference --rejected base --home /tmp/prefbase
    python -m bench preference --pairs 64 --held-out 100 --method orpo --sft-budget 0
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.preference_args import check_args, parse_args
from bench.preference_pairs import base_answers, bitext_pairs, read_rows, with_base_rejected
from finetune.config import RunConfig, first_run_defaults

SFT_NAME = "bench-sft"


def write_rows(path: Path, fields: list[str], rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def sft_config(data: Path, rows: int, minutes: float, steps: int, home: Path) -> RunConfig:
    """The SFT adapter's run on ``data``'s first ``rows`` rows (copied to ``home/sft-rows.csv``:
    ``max_samples`` alone would take a shuffled sample of the whole file, held-out rows included).

    Args:
        minutes: > 0: the Train tab's defaults with this time budget (it decides the steps);
            0: the settings before the budget, ``steps`` fixed steps, no mid-run extras.
    """
    head, fields = read_rows(data)
    path = write_rows(home / "sft-rows.csv", fields, head[:rows])
    if minutes > 0:
        cfg = first_run_defaults()
        cfg.train.time_budget_s = minutes * 60
        cfg.data.with_passages = 0  # as the preference runs it is compared with train
    else:
        cfg = RunConfig()
        cfg.train.max_steps = steps
        cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = 0
    cfg.data.path, cfg.data.max_samples = str(path), rows
    cfg.run.adapter_name = SFT_NAME
    return cfg


def train_sft(cfg: RunConfig) -> float:
    """Train ``cfg`` in this process; returns the seconds it took."""
    from finetune.train import train

    start = time.perf_counter()
    train(cfg)
    return time.perf_counter() - start


def sft_summary(manifest: dict, reused: bool, seconds: float) -> str:
    """How the SFT adapter was trained, from its manifest (``budget``: what a
    time budget bought)."""
    d, t, b = manifest["data"], manifest["training"], manifest.get("budget")
    rows = (
        f"{d['train_rows']} training + {d['val_rows']} validation rows of `{Path(d['path']).name}`"
    )
    batch = t["batch_size"] * t["grad_accum"]
    if b:
        how = (
            f"the Train tab's defaults for {b['seconds'] / 60:g} min on {rows}: the budget "
            f"bought {b['steps']} steps of {batch}, {b['rows_seen']} rows seen "
            f"({b['epochs']:.2f} epochs) in {b['seconds_used'] / 60:.1f} min"
        )
    else:
        how = f"{manifest['steps']} fixed steps of {batch} (no time budget) on {rows}"
    return how + (", reused from --home" if reused else f"; {seconds / 60:.1f} min in all")


def build_pairs(args, data: Path, home: Path) -> tuple[list[dict], list[dict], str]:
    """The training and held-out pairs, and a report line saying what ``rejected`` is."""
    own = args.rejected_rows == "pairs"
    rows = (
        slice(args.sft_rows, args.sft_rows + args.pairs)
        if own
        else slice(0, args.sft_rows + args.pairs)
    )
    train_pairs = bitext_pairs(data, args.sft_rows, args.pairs, rejected_rows=rows)
    held_out = bitext_pairs(data, -args.held_out, args.held_out, seed=1)
    if args.rejected == "other-intent":
        opening = ""
        if args.rejected_opening:  # the training pairs only: the held-out ones keep whole answers
            train_pairs = [
                {**p, "rejected": " ".join(p["rejected"].split()[: args.rejected_opening])}
                for p in train_pairs
            ]
            opening = (
                f" (training pairs: its first {args.rejected_opening} words, where it names "
                "its intent)"
            )
        where = (
            "another training pair's chosen"
            if own
            else f"from the first {args.sft_rows + args.pairs} rows"
        )
        return (
            train_pairs,
            held_out,
            (
                f"rejected = the answer of a row with another intent (training pairs: "
                f"{where}){opening}; "
                f"{len(train_pairs)} training pairs, {len(held_out)} held out"
            ),
        )
    from inference.session import ModelSession

    cache = home / "base-answers.jsonl"
    base = base_answers(
        ModelSession("default", dtype="float32"),
        [p["prompt"][-1]["content"] for p in train_pairs + held_out],
        cache,
        args.rejected_tokens,
    )
    train_pairs, skipped_train = with_base_rejected(train_pairs, base.answers)
    held_out, skipped_held = with_base_rejected(held_out, base.answers)
    return (
        train_pairs,
        held_out,
        (
            f"rejected = the base model's greedy answer (at most {args.rejected_tokens} tokens): "
            f"{base.generated} generated in {base.seconds / 60:.1f} min, "
            f"{len(set(base.answers)) - base.generated} from `{cache.name}`; {len(train_pairs)} "
            f"training pairs, {len(held_out)} held out ({skipped_train} and {skipped_held} left "
            "out: base answer empty or the reference)"
        ),
    )


def accuracy(adapter: str, pairs: list[dict]) -> tuple[float, float, float]:
    from finetune.train.preference import load_policy
    from finetune.train.preference_accuracy import preference_accuracy

    model, tokenizer, _ = load_policy(adapter, trainable=False)
    return preference_accuracy(model, tokenizer, pairs)


def start_accuracy(pairs: list[dict], sft_dir: Path, home: Path) -> tuple[float, float, float]:
    """The SFT adapter's accuracy on the held-out pairs, cached in the home under the adapter's
    weights and the pairs (~4 minutes on 2 cores for 200 pairs, the same every run of a --home)."""
    import hashlib

    from adapters.shelf.manifest import WEIGHTS

    key = hashlib.sha256(
        (sft_dir / WEIGHTS).read_bytes() + json.dumps(pairs, sort_keys=True).encode()
    ).hexdigest()
    cache = home / "start-accuracy.json"
    if cache.is_file() and (found := json.loads(cache.read_text())).get("key") == key:
        return tuple(found["accuracy"])
    result = accuracy(SFT_NAME, pairs)
    cache.write_text(json.dumps({"key": key, "accuracy": list(result)}))
    return result


def release_gate(
    child: str, data: Path, last_rows: int, per_intent: int, max_new_tokens: int, home: Path
):
    """The release gate of ``child`` against the version it was tuned from (``eval.run`` scores
    the parent beside it), on the file's last ``last_rows`` rows (never trained on), sliced by
    intent, ``per_intent`` rows each. Returns the report."""
    from eval.run import evaluate
    from inference.generate import GenerationSettings
    from inference.session import ModelSession

    rows, fields = read_rows(data)
    held = write_rows(home / "gate-rows.csv", fields, rows[-last_rows:])
    session = ModelSession("default", dtype="float32")
    return evaluate(
        session,
        [child],
        str(held),
        max_samples=min(500, last_rows),
        use_validation_split=False,
        slice_by="intent",
        rows_per_slice=per_intent,
        settings=GenerationSettings(max_new_tokens=max_new_tokens),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data)
    check_args(args, data)
    from finetune.train.preference import PreferenceConfig, train_preference

    with tempfile.TemporaryDirectory(prefix="tunedesk-pref-") as tmp:
        home = Path(args.home or tmp)
        home.mkdir(parents=True, exist_ok=True)
        os.environ["TUNEDESK_HOME"] = str(home)
        train_pairs, held_out, pairs_line = build_pairs(args, data, home)
        pairs_file = home / "pairs.jsonl"
        pairs_file.write_text("".join(json.dumps(x) + "\n" for x in train_pairs))
        sft_dir = home / "adapters" / SFT_NAME
        reused = sft_dir.is_dir()  # a --home kept from an earlier run
        sft_seconds = (
            0.0
            if reused
            else train_sft(sft_config(data, args.sft_rows, args.sft_budget, args.sft_steps, home))
        )
        sft_line = sft_summary(
            json.loads((sft_dir / "manifest.json").read_text()), reused, sft_seconds
        )
        before = start_accuracy(held_out, sft_dir, home)
        precision = (
            first_run_defaults().train.precision if args.precision == "auto" else args.precision
        )
        cfg = PreferenceConfig(
            SFT_NAME,
            str(pairs_file),
            name=f"bench-{args.method}",
            method=args.method,
            beta=args.beta,
            learning_rate=args.lr,
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_length=args.max_length,
            sft_weight=args.sft_weight,
            gradient_checkpointing=args.gradient_checkpointing,
            precision=precision,
            loss=args.loss,
            lean_head=not args.trl_head,
            seed=args.seed,
            time_budget_s=args.time_budget * 60,
        )
        shutil.rmtree(
            home / "adapters" / cfg.name, ignore_errors=True
        )  # the last run's, in a kept --home
        called = time.time()
        result = train_preference(cfg, started=called)
        whole = time.time() - called  # loading, the reference pass, training and the save
        bought = json.loads((result.path / "manifest.json").read_text()).get("budget")
        after = accuracy(result.name, held_out)
        print(
            f"preference accuracy {before[0]:.3f} -> {after[0]:.3f}, chosen perplexity "
            f"{before[2]:.2f} -> {after[2]:.2f} ({result.seconds / 60:.1f} "
            f"min){'; the gate next' if args.gate else ''}",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        report = (
            release_gate(
                result.name,
                data,
                args.gate_from or args.held_out,
                args.gate,
                args.gate_tokens,
                home,
            )
            if args.gate
            else None
        )
        gate_minutes = (time.perf_counter() - started) / 60
    lines = [
        "## Preference tuning on Bitext pairs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"- command: `python -m bench preference {' '.join(argv or [])}`",
        f"- pairs: {pairs_line}",
        f"- SFT adapter: {sft_line}",
        f"- {args.method.upper()}: {result.pairs} pairs, {result.steps} steps, batch "
        f"{args.batch_size}, lr {cfg.learning_rate}, beta {cfg.beta}, max length "
        f"{args.max_length}, {precision}"
        + (f", loss {args.loss}, SFT term weight {cfg.sft_weight}" if args.method != "orpo" else "")
        + (", TRL's LM head" if args.trl_head else "")
        + (f", seed {args.seed}" if args.seed else "")
        + f": {result.seconds / 60:.1f} min"
        + (
            f" (the reference scored first: {result.reference_seconds / 60:.1f} min)"
            if result.reference_seconds
            else ""
        )
        + f"; {whole / 60:.2f} min from the call to the saved adapter"
        + (
            f" under a {args.time_budget:g}-minute budget ({bought['epochs']:.2f} epochs)"
            if bought
            else ""
        ),
        "",
        "| adapter | held-out preference accuracy | mean log-prob margin | perplexity of the "
        "chosen answers |",
        "|---|---|---|---|",
        f"| SFT (start) | {before[0]:.3f} | {before[1]:.1f} | {before[2]:.2f} |",
        f"| after {args.method.upper()} | {after[0]:.3f} | {after[1]:.1f} | {after[2]:.2f} |",
        "",
    ]
    if report is not None:
        lines += gate_report(report, result.name, args, gate_minutes)
    print("\n".join(lines))
    return 0


def gate_report(report, child: str, args: argparse.Namespace, minutes: float) -> list[str]:
    """The release gate's verdict, reasons and per-model scores, as report lines."""
    from eval.gate import gate_lines

    verdict = report.gate[child]
    return [
        f"Release gate against the starting version ({report.data['rows']} held-out rows of the "
        f"file's last {args.gate_from or args.held_out}, {args.gate} per intent, answers of "
        f"{args.gate_tokens} tokens, {minutes:.1f} min): **{verdict['state']}**",
        "",
        *(f"- {line}" for line in gate_lines(report)),
        *(f"- _{note}_" for note in verdict["notes"]),
        "",
        "| model | BLEU | ROUGE-L | perplexity |",
        "|---|---|---|---|",
        *(
            f"| {m} | {report.metrics[m]['bleu']:.2f} | {report.metrics[m]['rouge_l']:.3f} | "
            f"{report.metrics[m]['perplexity']:.2f} |"
            for m in report.models
        ),
        "",
    ]
