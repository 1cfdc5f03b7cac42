"""`python -m bench shuffle-intents`: a labelled dataset copied, each answer from another intent.

The release gate's support checks must fail an adapter that answers fluently but about something
else. This writes the training file for one: each row keeps its question and its intent label,
and its response is another row's, always of a different intent (not a plain shuffle, which
leaves about 1 row in 27 with an answer of its own intent on Bitext).

    python -m bench shuffle-intents ../shared/datasets/bitext/bitext_v1_train.csv \\
        --out /tmp/bitext_v1_train_shuffled.csv

    # the file's first 200 rows left out of both training files, for an evaluation on them
    python -m bench shuffle-intents ../shared/datasets/bitext/bitext_v1_train.csv \\
        --skip-first 200 --out /tmp/bitext-shuffled.csv --unshuffled-out /tmp/bitext-train.csv

How: rows are grouped by intent (shuffled within each group with ``--seed``), laid end to end,
and each row takes the response of the row ``k`` places on (cyclically), where ``k`` is the size
of the largest group: a row and the one ``k`` places on can never share an intent. It needs the
largest intent to hold at most half the rows. CSV and JSON-lines files; the file is written
outside the repository (``--out``, or ``$TUNEDESK_HOME/datasets/<name>-shuffled-intents.<ext>``).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def moved_responses(labels: list[str], seed: int = 0) -> list[int]:
    """For each row, the row whose response it takes (always of another label).

    Raises:
        ValueError: one label holds more than half the rows (no such move exists).
    """
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    rng = random.Random(seed)
    order = []
    for label in sorted(groups):
        members = groups[label][:]
        rng.shuffle(members)
        order += members
    k = max(len(g) for g in groups.values())
    if 2 * k > len(labels):
        raise ValueError(
            f"one intent holds {k} of {len(labels)} rows: more than half, so its answers cannot "
            "all move to other intents"
        )
    source = [0] * len(labels)
    for pos, row in enumerate(order):
        source[row] = order[(pos + k) % len(order)]
    return source


def read_rows(path: Path) -> list[dict]:
    """The file's rows as dicts (CSV or JSON lines)."""
    if path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    if path.suffix.lower() in (".jsonl", ".json"):
        return [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    raise ValueError(f"{path.name}: expected a .csv or .jsonl file")


def write_rows(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )


def shuffle_file(
    data: Path,
    out: Path,
    intent: str = "intent",
    response: str = "response",
    seed: int = 0,
    skip_first: int = 0,
    unshuffled_out: Path | None = None,
) -> dict:
    """Write ``out``: ``data`` with every response moved to a row of another intent.

    Args:
        skip_first: leave the file's first rows out (an evaluation on them then sees questions
            neither adapter trained on).
        unshuffled_out: also write the same rows unshuffled here (the good adapter's training file).

    Returns:
        ``{"rows", "moved", "intents", "out"}``.
    """
    rows = read_rows(data)[skip_first:]
    if unshuffled_out is not None and rows:
        write_rows(rows, unshuffled_out)
    if not rows or intent not in rows[0] or response not in rows[0]:
        columns = ", ".join(rows[0]) if rows else "none"
        raise ValueError(
            f"{data.name} needs an {intent!r} and a {response!r} column (its columns: {columns})"
        )
    source = moved_responses([str(r[intent]) for r in rows], seed)
    shuffled = [{**r, response: rows[j][response]} for r, j in zip(rows, source, strict=True)]
    write_rows(shuffled, out)
    moved = sum(rows[j][intent] != r[intent] for r, j in zip(rows, source, strict=True))
    return {
        "rows": len(rows),
        "moved": moved,
        "intents": len({r[intent] for r in rows}),
        "out": str(out),
    }


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench shuffle-intents", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument("data", help="a CSV or JSON-lines file with an intent and a response column")
    p.add_argument("--out", help="where to write the copy (outside the repository)")
    p.add_argument("--intent-column", default="intent")
    p.add_argument("--response-column", default="response")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--skip-first",
        type=int,
        default=0,
        metavar="N",
        help="leave the first N rows out of the copies (to evaluate on them)",
    )
    p.add_argument("--unshuffled-out", help="also write the same rows unshuffled here")
    args = p.parse_args(argv)
    data = Path(args.data)
    if args.out:
        out = Path(args.out)
    else:
        from core import paths

        out = paths.subdir("datasets") / f"{data.stem}-shuffled-intents{data.suffix}"
    try:
        if not data.is_file():
            raise ValueError(f"data file {data} does not exist")
        plain = Path(args.unshuffled_out) if args.unshuffled_out else None
        for target in (out, plain):
            if target is not None and target.resolve().is_relative_to(REPO):
                raise ValueError(f"{target} is inside the repository; write the copies elsewhere")
        if args.skip_first < 0:
            raise ValueError(f"--skip-first must be 0 or more, got {args.skip_first}")
        found = shuffle_file(
            data, out, args.intent_column, args.response_column, args.seed, args.skip_first, plain
        )
    except (ValueError, OSError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(
        f"{found['moved']} of {found['rows']} responses moved to a row of another intent "
        f"({found['intents']} intents): {found['out']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
