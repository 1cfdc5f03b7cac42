"""`python -m feedback export [--name NAME]`: accepted ratings as training data in datasets/."""

from __future__ import annotations

import argparse

from core import paths
from feedback.review import export
from feedback.store import FeedbackStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name", default="feedback", help="file name stem in the home's datasets/ folder"
    )


def main(args: argparse.Namespace) -> int:
    name = paths.safe_name(args.name, "dataset name")
    sft, pairs, n_sft, n_pairs = export(FeedbackStore(), paths.subdir("datasets"), name)
    print(f"{n_sft} SFT rows -> {sft}\n{n_pairs} preference pairs -> {pairs}")
    return 0
