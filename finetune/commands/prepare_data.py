"""`python -m finetune prepare-data`: load, map, split and tokenize a dataset; print its stats.

Writes ``tokenized/`` (train, val), ``rows/`` (the untokenized rows, aligned) and
``stats.json`` to ``--out`` or ``$TUNEDESK_HOME/datasets/<fingerprint>/``. The same fingerprint
means the same examples, so an existing default folder is reused instead of rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path

from finetune.config import DataArgs, RunConfig, validate


def add_arguments(p) -> None:
    d = DataArgs()
    p.add_argument(
        "--data", default=d.path, help="data file, save_to_disk folder, or Hub dataset id"
    )
    p.add_argument("--model", default="default", help="base model whose tokenizer/template to use")
    p.add_argument("--max-length", type=int, default=d.max_length, help="tokens per example")
    p.add_argument(
        "--max-samples",
        type=int,
        default=None,
        help="use at most this many rows (default: every row)",
    )
    p.add_argument("--val-fraction", type=float, default=d.val_fraction, help="share held out")
    p.add_argument("--seed", type=int, default=d.seed, help="shuffle and split seed")
    p.add_argument(
        "--system-prompt", default=None, help="system message before every prompt (default: none)"
    )
    p.add_argument(
        "--prompt-column", default=None, help="column holding the user message (default: detected)"
    )
    p.add_argument(
        "--response-column", default=None, help="column holding the reply (default: detected)"
    )
    p.add_argument(
        "--messages-column",
        default=None,
        help="column holding chat message lists (default: detected)",
    )
    p.add_argument(
        "--truncation",
        default=d.truncation,
        choices=("truncate_response", "drop"),
        help="what to do with rows longer than --max-length",
    )
    p.add_argument(
        "--last-turn-only",
        action="store_true",
        help="in conversations, train only the final assistant answer",
    )
    p.add_argument(
        "--out", default=None, help="output folder (default: home/datasets/<fingerprint>)"
    )
    p.add_argument("--json", action="store_true", help="print the stats as JSON")


def data_args(args) -> DataArgs:
    """DataArgs from the parsed options; every invalid value reported at once."""
    d = DataArgs(
        path=args.data,
        prompt_column=args.prompt_column,
        response_column=args.response_column,
        messages_column=args.messages_column,
        system_prompt=args.system_prompt,
        max_length=args.max_length,
        truncation=args.truncation,
        last_turn_only=args.last_turn_only,
        val_fraction=args.val_fraction,
        max_samples=args.max_samples,
        seed=args.seed,
    )
    problems = validate(RunConfig(data=d))
    if problems:
        raise ValueError("; ".join(problems))
    return d


def main(args) -> int:
    from transformers import AutoTokenizer

    from core import models, paths
    from finetune import data

    d = data_args(args)
    if args.out and Path(args.out).exists():  # before the minutes of tokenizing
        what = (
            "already holds a prepared dataset: remove it first"
            if (Path(args.out) / "stats.json").is_file()
            else "exists; it is left as it is"
        )
        raise ValueError(f"--out {args.out} {what}, or name a new folder")
    from finetune.train.preflight import dataset_problems

    if problems := dataset_problems(d):  # before the model resolves (a conversion's progress)
        raise ValueError("; ".join(problems))
    tokenizer = AutoTokenizer.from_pretrained(models.resolve(args.model).path)
    prepared = data.prepare(d, tokenizer)
    out = Path(args.out) if args.out else paths.subdir("datasets") / prepared.fingerprint
    reused = out.is_dir() and (out / "stats.json").is_file() and not args.out
    if not reused:
        data.save_prepared(prepared, out)
    if args.json:
        print(json.dumps({**prepared.stats, "folder": str(out)}, indent=2, ensure_ascii=False))
    else:
        print(format_stats(prepared.stats))
        print(f"{'reused' if reused else 'written'}: {out}")
    return 0


def format_stats(s: dict) -> str:
    """Stats as a short human-readable report."""
    mapping = ", ".join(f"{k}={v}" for k, v in s["mapping"].items() if v)
    t = s["tokens"]
    lines = [
        f"dataset      {s['source']}  (fingerprint {s['fingerprint']})",
        f"columns      {mapping}  [template: {s['template']}, end of turn {s['end_of_turn']}]",
        f"rows         {s['rows_loaded']} loaded, {s['rows_skipped']} skipped"
        + (f" {s['skip_reasons']}" if s["rows_skipped"] else "")
        + f", {s['rows_train']} train, {s['rows_val']} validation",
        f"length       {s['truncated']} truncated, {s['dropped_too_long']} dropped as too long, "
        f"{s['dropped_prompt_too_long']} dropped (prompt alone over {s['max_length']} tokens)"
        + (
            f", {s['dropped_template_error']} rejected by the chat template"
            if s["dropped_template_error"]
            else ""
        ),
        f"turns        {s.get('conversations', 0)} conversations, "
        f"{s.get('assistant_turns_trained', 0)} assistant turns trained, "
        f"{s.get('conversations_shortened', 0)} shortened (oldest turns dropped to fit)",
        f"tokens       p50 {t['p50']}  p90 {t['p90']}  p99 {t['p99']}  max {t['max']}  "
        f"({t['total']} total, {t['label_total']} trained on)",
    ]
    if s.get("rows_with_control_tokens"):
        lines.append(
            f"control      {s['rows_with_control_tokens']} rows hold control-token strings "
            "(such as <|im_start|>); they are trained on as plain text"
        )
    for example in s["skipped_examples"]:
        lines.append(f"  skipped    {example}")
    if s["intents"]:
        top = ", ".join(f"{name} {count}" for name, count in s["intents"])
        lines.append(f"intents      {s['intent_count']} distinct; top: {top}")
    return "\n".join(lines)
