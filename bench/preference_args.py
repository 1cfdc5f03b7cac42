"""The flags of ``python -m bench preference`` (bench/preference.py) and their checks."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.preference_pairs import read_rows

REPO = Path(__file__).resolve().parents[1]
BITEXT = REPO.parent / "shared" / "datasets" / "bitext" / "bitext_v1_train.csv"
DESCRIPTION = "DPO, CPO or ORPO on Bitext preference pairs over an SFT adapter."


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(prog="python -m bench preference", description=DESCRIPTION)
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument("--data", default=str(BITEXT), help="Bitext training CSV")
    p.add_argument("--method", choices=["dpo", "cpo", "orpo"], default="dpo")
    p.add_argument(
        "--rejected",
        choices=["other-intent", "base"],
        default="other-intent",
        help=(
            "the rejected answer: another intent's reference answer, or the base model's own "
            "greedy answer (generated once, cached in the bench home)"
        ),
    )
    p.add_argument(
        "--rejected-tokens", type=int, default=96, help="--rejected base: the answers' length cap"
    )
    p.add_argument(
        "--rejected-rows",
        choices=["training", "pairs"],
        default="training",
        help=(
            "--rejected other-intent: the training pairs' rejected answers come from the "
            "training rows (the SFT rows and the pairs') or from the pairs' own rows (each "
            "another pair's chosen, so the SFT term holds it up under its own prompt); never "
            "from held-out rows"
        ),
    )
    p.add_argument(
        "--rejected-opening",
        type=int,
        default=0,
        metavar="WORDS",
        help=(
            "--rejected other-intent: train on the rejected answer's first WORDS words only "
            "(0: whole); the held-out pairs keep whole answers"
        ),
    )
    p.add_argument(
        "--sft-rows",
        type=int,
        default=400,
        help=(
            "the SFT adapter trains on the file's first N rows, 5 %% of them for validation "
            "(Train tab: 400)"
        ),
    )
    p.add_argument(
        "--sft-budget",
        type=float,
        default=10.0,
        metavar="MINUTES",
        help="train the SFT adapter with the Train tab's defaults for this long (Train tab: 10); "
        "0: --sft-steps fixed steps, the settings before the time budget",
    )
    p.add_argument(
        "--sft-steps",
        type=int,
        default=30,
        help="with --sft-budget 0: its optimizer steps (was 30)",
    )
    p.add_argument("--pairs", type=int, default=128, help="pairs the preference run trains on")
    p.add_argument(
        "--held-out",
        type=int,
        default=200,
        help="pairs kept out for the accuracy (the file's last rows)",
    )
    p.add_argument(
        "--epochs", type=float, default=None, help="default: the method's (DPO and CPO 1.5, ORPO 1)"
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="the preference run's time budget, from the call to the saved adapter (0: off; the "
        "method's epochs still cap it)",
    )
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument(
        "--lr", type=float, default=None, help="default: the method's (DPO and CPO 1e-3, ORPO 5e-4)"
    )
    p.add_argument(
        "--beta",
        type=float,
        default=None,
        help="default: the method's (DPO and CPO 0.05, ORPO 0.02)",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=128,
        help="prompt + answer tokens a pair trains on (the product's default: 256); 128 cuts most "
        "Bitext answers short, and with them the length that decides most lost pairs",
    )
    p.add_argument(
        "--sft-weight",
        type=float,
        default=None,
        help=(
            "DPO/CPO: weight of the SFT term on chosen answers (default: the method's, 6 for both)"
        ),
    )
    p.add_argument(
        "--loss",
        choices=["sigmoid", "apo_zero", "ipo"],
        default="sigmoid",
        help=(
            "DPO: TRL's preference loss (sigmoid: DPO's own; apo_zero: anchored; ipo: "
            "margin-capped)"
        ),
    )
    p.add_argument(
        "--seed", type=int, default=0, help="the preference run's seed (the pairs' order)"
    )
    p.add_argument(
        "--trl-head",
        action="store_true",
        help=(
            "DPO/CPO on the CPU: TRL's own fused LM head instead of TuneDesk's lean one (the "
            "baseline)"
        ),
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help=(
            "of the preference run (auto: the Train tab's default here, measured: bf16 on "
            "CPUs whose bf16 products are clearly faster)"
        ),
    )
    p.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in the backward pass (TRL's default; off here as in SFT)",
    )
    p.add_argument(
        "--home",
        help="keep the working files here, and reuse the SFT adapter and base answers "
        "found there (default: a temporary folder)",
    )
    p.add_argument(
        "--gate",
        type=int,
        default=3,
        metavar="ROWS",
        help="then the release gate against the starting version on the held-out rows, this many "
        "per intent (0: no gate)",
    )
    p.add_argument(
        "--gate-tokens", type=int, default=48, help="answer length in the gate's evaluation"
    )
    p.add_argument(
        "--gate-from",
        type=int,
        default=0,
        metavar="LAST",
        help=(
            "the gate's rows come from the file's last LAST rows (0: the --held-out rows); a "
            "slice needs ~11 rows before the gate's corrected test can flag it, 5 never can"
        ),
    )
    return p.parse_args(argv)


def check_args(args: argparse.Namespace, data: Path) -> None:
    """Raise one ValueError naming every problem with the arguments."""
    if not data.is_file():
        raise ValueError(
            f"{data} is not there; the Bitext files live in ../shared/datasets/bitext/"
        )
    total = len(read_rows(data)[0])
    problems = [
        text
        for bad, text in [
            (
                args.sft_rows + args.pairs > total - max(args.held_out, args.gate_from),
                "--sft-rows + --pairs + max(--held-out, --gate-from) must fit in the file's "
                f"{total:,} rows",
            ),
            (args.gate_from < 0, f"--gate-from must be 0 or more rows, got {args.gate_from}"),
            (
                args.sft_budget < 0,
                f"--sft-budget must be 0 (fixed steps) or more minutes, got {args.sft_budget}",
            ),
            (
                args.sft_budget == 0 and args.sft_steps < 1,
                f"--sft-steps must be 1 or more, got {args.sft_steps}",
            ),
            (
                args.time_budget != 0 and not 0.5 <= args.time_budget <= 7 * 24 * 60,
                "--time-budget must be 0 (off) or from 0.5 minutes to 7 days, got "
                f"{args.time_budget}",
            ),
            (
                args.rejected_opening < 0,
                f"--rejected-opening must be 0 or more words, got {args.rejected_opening}",
            ),
            (
                not 1 <= args.rejected_tokens <= 2048,
                f"--rejected-tokens must be from 1 to 2048, got {args.rejected_tokens}",
            ),
        ]
        if bad
    ]
    if problems:
        raise ValueError("; ".join(problems))
