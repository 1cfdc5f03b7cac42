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
        for line in table(rows, columns):
            print(line)
    return 0


# Widest a column gets before its text is cut with an ellipsis (the rest as wide as its text).
MAX_WIDTH = {"title": 48, "source": 48, "sources": 48, "name": 32, "intent": 28}
NUMBERS = ("id", "passages")  # right-aligned


def table(rows: list[dict], columns: tuple[str, ...]) -> list[str]:
    """``rows`` as lines of aligned ``columns``: a header, then a line a row. Each column is as
    wide as its widest cell (at most :data:`MAX_WIDTH`; longer text ends in ``…``), numbers
    right-aligned, two spaces between columns, no trailing spaces."""
    cells = [[_cell(row, c) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = []
    for line in [list(columns), *cells]:
        shown = [
            text.rjust(width) if column in NUMBERS else text.ljust(width)
            for text, width, column in zip(line, widths, columns, strict=True)
        ]
        lines.append("  ".join(shown).rstrip())
    return lines


def _cell(row: dict, column: str) -> str:
    value = row.get(column)
    if column == "intent" and not value:
        return "-"  # no label
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    if isinstance(value, int) and column == "passages":
        return f"{value:,}"
    text = " ".join(str(value).split())  # a title's line breaks or tabs would break the line
    width = MAX_WIDTH.get(column)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"
