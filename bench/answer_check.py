"""`python -m bench answer-check`: what the check before an answer is sent does on held-out rows.

A labelled CSV's rows are shuffled (``--seed``); the first ``--held`` are held out, the rest
go on a temporary knowledge shelf as labelled past answers (as training puts them there). For
the held-out questions it reports the question classifier's accuracy and how many of its
predictions lead the runner-up by less than each margin (the hand-off threshold,
:data:`knowledge.answer_check.MIN_MARGIN`), then the check's outcomes for two kinds of answer:
the rows' own reference answers (every outcome but ``ok`` is a false alarm) and the same
answers shuffled across rows (mostly another intent: ``ok`` is a miss), with how many
re-answers carry the row's own intent.

    python -m bench answer-check                          # Bitext training CSV, 300 held out
    python -m bench answer-check --data FILE.csv --held 300 --seed 0
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.knowledge_retrieval import DEFAULT_DATA
from knowledge.answer_check import OUTCOMES, check_answer, checker_for
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs

MARGINS = (0.1, 0.2, 0.3, 0.5)


def measure(
    rows: list[dict],
    held: int,
    seed: int,
    question: str = "instruction",
    answer: str = "response",
    intent: str = "intent",
) -> dict:
    """The question classifier's accuracy and margins, and the check's outcomes (see above)."""
    rows = list(rows)
    rng = random.Random(seed)
    rng.shuffle(rows)
    kept, train = rows[:held], rows[held:]
    with tempfile.TemporaryDirectory() as tmp:
        shelf = KnowledgeShelf(Path(tmp))
        version = shelve_pairs(
            [r[question] for r in train],
            [r[answer] for r in train],
            dataset_fingerprint="bench",
            data_path="bench.csv",
            shelf=shelf,
            intents=[r[intent] or None for r in train],
        )
        t0 = time.perf_counter()
        checker, why = checker_for(version)
        if checker is None:
            raise ValueError(why)
        fit_s = time.perf_counter() - t0
        asked = [r[question] for r in kept]
        named = checker.questions.predict(asked)
        margins = checker.questions.margins(asked)
        right = [n == r[intent] for n, r in zip(named, kept, strict=True)]
        shuffled = [r[answer] for r in kept]
        rng.shuffle(shuffled)
        return {
            "past_answers": len(train),
            "held": len(kept),
            "fit_s": fit_s,
            "question_accuracy": sum(right) / len(kept),
            "margins": {
                m: (
                    sum(x < m for x in margins),
                    sum(x < m and not ok for x, ok in zip(margins, right, strict=True)),
                )
                for m in MARGINS
            },
            "reference": _outcomes(
                kept, [r[answer] for r in kept], version, shelf, question, intent
            ),
            "shuffled": _outcomes(kept, shuffled, version, shelf, question, intent),
        }


def _outcomes(rows, answers, version, shelf, question, intent) -> dict:
    counts, right, t0 = Counter(), 0, time.perf_counter()
    for row, text in zip(rows, answers, strict=True):
        found = check_answer(row[question], text, version.name, version.version, shelf=shelf)
        counts[found.outcome] += 1
        right += found.outcome == "re-answered" and found.asked == row[intent]
    return {
        **{k: counts[k] for k in OUTCOMES},
        "re-answered right": right,
        "ms_per_answer": (time.perf_counter() - t0) * 1000 / max(1, len(rows)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench answer-check",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data", default=str(DEFAULT_DATA), help="labelled CSV (instruction, response, intent)"
    )
    p.add_argument("--held", type=int, default=300, help="rows held out (the rest: past answers)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        with open(args.data, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        found = measure(rows, args.held, args.seed)
    except (OSError, KeyError, ValueError) as err:
        print(f"cannot measure {args.data}: {err}", file=sys.stderr)
        return 2
    print(
        f"{found['past_answers']} labelled past answers (fitted in {found['fit_s']:.1f} s), "
        f"{found['held']} held-out questions"
    )
    print(f"question classifier: {found['question_accuracy']:.3f} of held-out questions right")
    for m, (low, wrong) in found["margins"].items():
        print(f"  lead under {m:g}: {low} questions, {wrong} of them named wrong")
    print("| answers | " + " | ".join(OUTCOMES) + " | re-answered right | ms per answer |")
    print("|---|" + "---:|" * (len(OUTCOMES) + 2))
    for label in ("reference", "shuffled"):
        c = found[label]
        print(
            f"| {label} | "
            + " | ".join(str(c[k]) for k in OUTCOMES)
            + f" | {c['re-answered right']} | {c['ms_per_answer']:.1f} |"
        )
    return 0
