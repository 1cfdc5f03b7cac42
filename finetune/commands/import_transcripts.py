"""`python -m finetune import-transcripts EXPORT --out DIR`: a helpdesk export -> redacted
conversations in ``DIR/train.jsonl`` and ``DIR/eval.jsonl`` (split by conversation), ready for
``python -m finetune train --data DIR/train.jsonl``. Stats go to ``DIR/import_stats.json``.
Each conversation carries its ticket's ``intent`` from the export's intent, category, topic or
tags column (found by name, or ``--intent-column``; ``--no-intent`` reads none).
"""

from __future__ import annotations

import json

from finetune.data.helpdesk import COLUMNS, parse_column_map, parse_intent_tags, parse_role_map


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
    intent = p.add_mutually_exclusive_group()
    intent.add_argument(
        "--intent-column",
        default=None,
        metavar="NAME",
        help="the column holding each ticket's intent (default: one named intent, category, "
        "topic, reason, tags, labels or type, in that order)",
    )
    intent.add_argument(
        "--no-intent", action="store_true", help="read no intent: the rows carry none"
    )
    p.add_argument(
        "--intent-tags",
        default="",
        metavar="TAG=INTENT,...",
        help="a ticket holding one of these tags gets that intent (e.g. wismo=track_order); "
        "otherwise its first tag that is not a status or priority word",
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

    columns = parse_column_map(args.column_map)
    if args.intent_column or args.no_intent:
        columns["intent"] = None if args.no_intent else args.intent_column
    stats = import_to_folder(
        args.export,
        args.out,
        args.eval_fraction,
        args.seed,
        args.format,
        columns,
        parse_role_map(args.role_map),
        parse_intent_tags(args.intent_tags),
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
        f"intents       {intent_line(s)}",
        f"split         {s['conversations_train']} train, {s['conversations_eval']} eval "
        f"(whole conversations, seed {s['seed']})",
    ]
    lines += [f"  note        {e}" for e in s["examples"]]
    lines.append(
        f"written       {s['train_file']}" + (f", {s['eval_file']}" if s["eval_file"] else "")
    )
    return "\n".join(lines)


def intent_line(s: dict) -> str:
    """Which column gave the conversations' intents and how many got one, or what to do."""
    found = s["intent"]
    if found["off"]:
        return "not read (--no-intent)"
    if found["column"] is None:
        return (
            "none: no intent, category, topic or tags column among "
            f"{', '.join(s['file_columns'])}; name the column holding each ticket's label with "
            "--intent-column NAME, or the release gate's answer-quality floors cannot be checked"
        )
    labels = found["labels"]
    head = f"from column {found['column']}: {found['conversations']} of {s['conversations']} "
    if not labels:
        return head + (
            "conversations got one (each value empty or a status or priority word); name "
            "another column with --intent-column NAME, or map tags with --intent-tags TAG=INTENT"
        )
    shown = ", ".join(f"{k} {n}" for k, n in list(labels.items())[:5])
    more = ", ..." if len(labels) > 5 else ""
    one = "; one intent for all: is it the right column?" if len(labels) == 1 else ""
    return head + f"conversations ({len(labels)} intents: {shown}{more}){one}"
