"""`python -m finetune import-transcripts EXPORT --out DIR`: a helpdesk export -> redacted
conversations in ``DIR/train.jsonl`` and ``DIR/eval.jsonl`` (split by conversation), ready for
``python -m finetune train --data DIR/train.jsonl``. Stats go to ``DIR/import_stats.json``.
"""

from __future__ import annotations

import json

from finetune.data.helpdesk import COLUMNS, parse_column_map, parse_role_map


def add_arguments(p) -> None:
    p.add_argument(
        "export", help="helpdesk export: .csv/.tsv, .jsonl or .json, one row per message"
    )
    p.add_argument(
        "--out", required=True, help="folder for train.jsonl, eval.jsonl, import_stats.json"
    )
    p.add_argument(
        "--format",
        choices=("csv", "jsonl", "json"),
        default=None,
        help="file format (default: from the file name)",
    )
    p.add_argument(
        "--column-map",
        default="",
        metavar="FIELD=COLUMN,...",
        help=f"name the export's columns; fields: {', '.join(COLUMNS)} "
        "(e.g. ticket=case_no,role=sender_type,text=msg)",
    )
    p.add_argument(
        "--role-map",
        default="",
        metavar="VALUE=ROLE,...",
        help="extra author-role values: VALUE=user, VALUE=assistant or VALUE=drop",
    )
    p.add_argument(
        "--eval-fraction",
        type=float,
        default=0.1,
        help="share of conversations held out in eval.jsonl (whole conversations)",
    )
    p.add_argument("--seed", type=int, default=42, help="split seed")
    p.add_argument("--json", action="store_true", help="print the stats as JSON")


def main(args) -> int:
    from finetune.data.transcripts import import_to_folder

    stats = import_to_folder(
        args.export,
        args.out,
        args.eval_fraction,
        args.seed,
        args.format,
        parse_column_map(args.column_map),
        parse_role_map(args.role_map),
    )
    print(json.dumps(stats, indent=2, ensure_ascii=False) if args.json else format_stats(stats))
    return 0


def format_stats(s: dict) -> str:
    """The import's stats as a short report."""

    def counts(d: dict) -> str:
        return ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in d.items() if n) or "none"

    lines = [
        f"export        {s['source']}  (columns: "
        f"{', '.join(f'{k}={v}' for k, v in s['columns'].items())})",
        f"rows          {s['rows_read']} read; left out: {counts(s['rows_skipped'])}",
        f"tickets       {s['tickets']}: {s['conversations']} conversations ({s['messages']} "
        f"messages); skipped: {counts(s['skipped'])}",
        f"dropped       {counts(s['dropped'])}",
        f"redacted      {counts(s['redactions'])}",
        f"split         {s['conversations_train']} train, {s['conversations_eval']} eval "
        f"(whole conversations, seed {s['seed']})",
    ]
    lines += [f"  note        {e}" for e in s["examples"]]
    lines.append(
        f"written       {s['train_file']}" + (f", {s['eval_file']}" if s["eval_file"] else "")
    )
    return "\n".join(lines)
