"""`python -m feedback list`: the review queue, newest first."""

from __future__ import annotations

import argparse
import json

from feedback.review import STATUSES, Filter, as_day, queue
from feedback.store import RATINGS, FeedbackStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adapter", help="only ratings of this adapter ('base' for the base model)")
    p.add_argument("--version", help="only this version (a prefix of its weights hash)")
    p.add_argument("--rating", choices=RATINGS, help="only thumbs-up or only thumbs-down ratings")
    p.add_argument(
        "--status",
        choices=STATUSES,
        help="only ratings not reviewed yet (new), or those accepted or dropped by `review`",
    )
    p.add_argument("--intent", help="only ratings with this intent label (any case)")
    p.add_argument("--since", type=day, help="created on or after this day (YYYY-MM-DD)")
    p.add_argument("--until", type=day, help="created on or before this day (YYYY-MM-DD)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def day(text: str) -> str:
    """A ``--since`` / ``--until`` value: a real calendar day written YYYY-MM-DD."""
    found = as_day(text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"must be a day written YYYY-MM-DD, such as 2026-11-25, not {text[:20]!r}"
        )
    return found


def main(args: argparse.Namespace) -> int:
    if args.since and args.until and args.since > args.until:  # both YYYY-MM-DD: text order
        raise ValueError(
            f"--since {args.since} is after --until {args.until}, so no day is in between; "
            "give the earlier day to --since"
        )
    where = Filter(
        adapter=args.adapter,
        version=args.version,
        rating=args.rating,
        status=args.status,
        intent=args.intent,
        since=args.since,
        until=args.until,
    )
    rows = queue(FeedbackStore(), where)
    for row in rows:
        if args.json:
            print(json.dumps(row, ensure_ascii=False))
            continue
        asked = next(
            (m["content"] for m in reversed(row.get("messages") or []) if m.get("role") == "user"),
            "(conversation not kept)",
        )
        print(
            f"{row['id']}  {row.get('created', '')}  {row.get('status', 'new'):8}  "
            f"{row['rating']:4}  {row.get('adapter')}@{str(row.get('version', ''))[:8]}  "
            + (f"[{row['intent']}]  " if row.get("intent") else "")
            + f"{asked[:60]!r}"
            + (f"  -> {row['correction'][:60]!r}" if row.get("correction") else "")
        )
    if not args.json:
        print(f"{len(rows)} rating(s)")
    return 0
