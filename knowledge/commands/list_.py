"""`python -m knowledge list [NAME] [--version V]`: knowledge bases, versions or passages."""

from __future__ import annotations

import json

MAX_LIMIT = 1_000_000_000  # SQLite's integers end near 9.2e18; no shelf holds more passages


def add_arguments(p) -> None:
    p.add_argument(
        "name",
        nargs="?",
        default=None,
        help="a knowledge base: list its versions (default: list every knowledge base)",
    )
    p.add_argument(
        "--version", default=None, help="list this version's passages ('latest': the newest)"
    )
    p.add_argument(
        "--limit", type=int, default=20, help="passages shown with --version (default: %(default)s)"
    )
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        help="with --version: passages skipped first, in id order (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object a line")


def main(args) -> int:
    from knowledge.actions import passage_rows, version_rows

    if args.version is not None:
        if not args.name:
            raise ValueError("--version needs a knowledge base name")
        if not 1 <= args.limit <= MAX_LIMIT:
            raise ValueError(f"--limit must be from 1 to {MAX_LIMIT:,} passages, not {args.limit}")
        if not 0 <= args.offset <= MAX_LIMIT:
            raise ValueError(f"--offset must be from 0 to {MAX_LIMIT:,}, not {args.offset}")
        rows = passage_rows(args.name, args.version, offset=args.offset, limit=args.limit)
        columns = ("id", "kind", "intent", "title", "source")
    else:
        rows = version_rows(args.name)
        columns = ("name", "version", "passages", "created", "fingerprint", "sources")
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    elif not rows and args.version is not None:
        after = f" after the first {args.offset:,}" if args.offset else ""
        print(f"{args.name} {args.version} holds no passages{after}.")
    elif not rows:
        print("The knowledge shelf is empty: import a file (python -m knowledge import FILE).")
    else:
        print("  ".join(f"{c:>8}" if c in ("id", "passages") else c for c in columns))
        for row in rows:
            print("  ".join(_cell(row, c) for c in columns))
    return 0


def _cell(row: dict, column: str) -> str:
    value = row.get(column)
    if column == "intent" and not value:
        return "-"  # no label
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    text = str(value)
    return f"{text:>8}" if column in ("id", "passages") else text[:60]
