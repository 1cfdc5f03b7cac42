"""`python -m feedback export [--name NAME] [--overwrite]`: accepted ratings as training data in
datasets/; an existing file is replaced only with --overwrite."""

from __future__ import annotations

import argparse

from core import paths
from feedback.review import export
from feedback.store import FeedbackStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name", default="feedback", help="file name stem in the home's datasets/ folder"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace NAME.jsonl and NAME-pairs.jsonl where they exist (else refused)",
    )


def main(args: argparse.Namespace) -> int:
    name = paths.safe_name(args.name, "dataset name")
    sft, pairs, n_sft, n_pairs = export(
        FeedbackStore(), paths.subdir("datasets"), name, overwrite=args.overwrite
    )
    print(f"{n_sft} SFT rows -> {sft}\n{n_pairs} preference pairs -> {pairs}")
    return 0
