"""`python -m feedback review ID --accept|--drop [--correction TEXT] [--intent LABEL]`."""

from __future__ import annotations

import argparse

from feedback.review import review
from feedback.store import FeedbackStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="the rating's id (fb-...), as `list` shows it")
    status = p.add_mutually_exclusive_group()
    status.add_argument("--accept", action="store_true", help="use it for training")
    status.add_argument("--drop", action="store_true", help="leave it out")
    p.add_argument("--correction", help="replace the corrected answer")
    p.add_argument("--intent", help="set its intent label ('' clears it)")


def main(args: argparse.Namespace) -> int:
    status = "accepted" if args.accept else "dropped" if args.drop else None
    if status is None and args.correction is None and args.intent is None:
        raise ValueError("say --accept, --drop, --correction TEXT or --intent LABEL")
    try:
        row = review(FeedbackStore(), args.id, status, args.correction, args.intent)
    except KeyError:
        raise ValueError(
            f"no rating with id {args.id!r}; `python -m feedback list` shows them"
        ) from None
    print(
        f"{row['id']}: {row['status']}"
        + (f", correction {row['correction']!r}" if row.get("correction") else "")
        + (f", intent {row['intent']!r}" if row.get("intent") else "")
    )
    return 0
