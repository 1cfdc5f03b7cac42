"""The judge's command-line side: ``python -m eval``'s judge flags and
``python -m eval judge-check``.

    python -m eval --adapter NAME --data FILE --judge-url http://127.0.0.1:8080 --judge-model judge
    python -m eval judge-check --judge-url URL --judge-model NAME [--rows 100] [--adapter NAME]

``judge-check`` grades the review queue's human-rated answers alone (no model is loaded) and
says how far the judge agrees with people: the number of answers, the raw agreement, Cohen's
kappa, the four cells of the table and a few answers where they disagree. It saves the result
under ``$TUNEDESK_HOME/evals/judge-checks/``. The key comes from ``--judge-key`` or
``$TUNEDESK_JUDGE_KEY`` and is never saved.
"""

from __future__ import annotations

import argparse
import json
import time

from core import paths
from eval.judge import KEY_ENV, JudgeConfig, config_from, grade_all
from eval.judge_agreement import agreement, review_items
from eval.judge_gate import rates_text
from eval.judge_grades import GRADED, rates
from eval.judge_run import garbage_problem

SHOWN_DISAGREEMENTS = 5


def add_judge_arguments(p: argparse.ArgumentParser, required: bool = False) -> None:
    """The judge's flags (``--judge-url`` and ``--judge-model`` switch it on)."""
    defaults = JudgeConfig(url="", model="")
    p.add_argument(
        "--judge-url",
        required=required,
        metavar="URL",
        help="an OpenAI-compatible endpoint that grades every answer (e.g. http://127.0.0.1:8080)",
    )
    p.add_argument(
        "--judge-model",
        required=required,
        metavar="NAME",
        help="the model the judge endpoint serves",
    )
    p.add_argument("--judge-key", metavar="KEY", help=f"the endpoint's key (default: ${KEY_ENV})")
    p.add_argument(
        "--judge-timeout",
        type=float,
        default=defaults.timeout,
        help=f"seconds per judge request (default {defaults.timeout:g})",
    )
    p.add_argument(
        "--judge-retries",
        type=int,
        default=defaults.retries,
        help=f"tries after the first on connection errors (default {defaults.retries})",
    )
    p.add_argument(
        "--judge-max-tokens",
        type=int,
        default=defaults.max_tokens,
        help=f"the judge's reply length cap (default {defaults.max_tokens})",
    )
    p.add_argument(
        "--judge-workers",
        type=int,
        default=defaults.workers,
        help=f"judge requests at once (default {defaults.workers})",
    )


def judge_config(args, review_rows: int | None = None) -> JudgeConfig | None:
    """The checked judge settings from parsed ``args``; None when no judge was asked for.

    Raises:
        ValueError: half a judge (a URL without a model, or the other way) or bad settings.
    """
    if not args.judge_url and not args.judge_model:
        return None
    if not args.judge_url or not args.judge_model:
        raise ValueError("a judge needs both --judge-url and --judge-model")
    rows = (
        getattr(args, "judge_review_rows", JudgeConfig.review_rows)
        if review_rows is None
        else review_rows
    )
    return config_from(
        args.judge_url,
        args.judge_model,
        args.judge_key,
        timeout=args.judge_timeout,
        retries=args.judge_retries,
        max_tokens=args.judge_max_tokens,
        workers=args.judge_workers,
        review_rows=rows,
    )


DESCRIPTION = (
    "grade the review queue's human-rated answers with a judge and show its agreement with people"
)


def build_parser() -> argparse.ArgumentParser:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m eval judge-check",
        description=DESCRIPTION,
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    add_judge_arguments(p, required=True)
    p.add_argument(
        "--rows", type=int, default=100, help="rated answers to grade, newest first (default 100)"
    )
    p.add_argument("--adapter", help="only answers of this adapter (or base)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def judge_check(config: JudgeConfig, ratings: list[dict], rows: int) -> dict:
    """Grade up to ``rows`` human-rated answers and measure agreement; the saved record."""
    start = time.perf_counter()
    items = review_items(ratings, rows)
    grades, problem = grade_all(config, [(x["question"], x["answer"], None) for x in items])
    pairs = [(x, g) for x, g in zip(items, grades, strict=True) if g["status"] == GRADED]
    found = agreement([x["human"] for x, _ in pairs], [int(g["passed"]) for _, g in pairs])
    disagree = [
        {
            "question": x["question"],
            "answer": x["answer"],
            "human": "up" if x["human"] else "down",
            "judge": {k: v for k, v in g.items() if k != "status"},
        }
        for x, g in pairs
        if int(g["passed"]) != x["human"]
    ]
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "judge": config.describe(),
        "asked": len(items),
        "rates": rates(grades),
        "agreement": found,
        "disagreements": disagree,
        "problem": problem or garbage_problem(grades),
        "seconds": round(time.perf_counter() - start, 3),
    }


def main(argv: list[str]) -> int:
    """``python -m eval judge-check``: 0, or 1 when the judge failed (the saved record says why);
    bad settings raise ValueError (the caller prints it, exit status 2)."""
    from feedback.store import FeedbackStore

    args = build_parser().parse_args(argv)
    if args.rows < 1:
        raise ValueError(f"--rows must be at least 1, got {args.rows}")
    config = judge_config(args, review_rows=args.rows)
    ratings = [r for r in FeedbackStore().ratings() if args.adapter in (None, r.get("adapter"))]
    if not review_items(ratings, 1):
        raise ValueError(
            "the review queue holds no rated answer with its conversation to grade "
            "(rate answers in Chat or Compare, or serve /v1 with --log-conversations)"
        )
    result = judge_check(config, ratings, args.rows)
    result["saved"] = str(save_check(result))
    print(
        json.dumps(result, indent=2, ensure_ascii=False)
        if args.json
        else "\n".join(check_lines(result))
    )
    return 1 if result["problem"] else 0  # saved either way; a script sees nothing was measured


def save_check(result: dict):
    """Write ``result`` as ``evals/judge-checks/<time>.json``; returns the path."""
    folder = paths.subdir("evals") / "judge-checks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{time.perf_counter_ns() % 10**6:06d}.json"
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return path


def check_lines(result: dict) -> list[str]:
    """What ``judge-check`` prints."""
    a = result["agreement"]
    kappa = f"{a['kappa']:.2f}" if a["kappa"] is not None else a["kappa_note"]
    raw = f"{a['raw']:.0%}" if a["raw"] is not None else "n/a"
    lines = [
        f"judge {result['judge']['model']} at {result['judge']['url']}: {result['asked']} rated "
        f"answers asked, {rates_text(result['rates'])} ({result['seconds']} s)",
        f"agreement with people on {a['n']} answers: raw {raw}, Cohen's kappa {kappa}",
        f"  both pass {a['both_pass']}, people only {a['human_only']}, judge only "
        f"{a['judge_only']}, both fail {a['both_fail']}",
    ]
    for d in result["disagreements"][:SHOWN_DISAGREEMENTS]:
        lines.append(
            f"  people {d['human']}, judge {'up' if d['judge'].get('passed') else 'down'}: "
            f"{_short(d['question'])} -> {_short(d['answer'])}"
        )
    if result["problem"]:
        lines.append(f"problem: {result['problem']}")
    lines.append(f"saved: {result['saved']}")
    return lines


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
