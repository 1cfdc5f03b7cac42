"""The judge inside an evaluation: every model's answers graded, and its agreement with people.

:func:`judge_report` grades each scored row's answer of every model against the row's
reference, then measures agreement (:mod:`eval.judge_agreement`) on the answers people rated
in the review queue: the evaluated answers that people happen to have rated, and up to
``config.review_rows`` more rated answers from the queue, graded here for that purpose (without
a reference: the queue keeps none). The result is the report's ``judge``; the release gate
(:mod:`eval.judge_gate`) decides from it whether the judge counts.

Nothing here raises for the judge's sake: an unreachable or garbage-answering judge leaves a
``problem`` sentence and the grades it could not give as ``not asked`` / ``unparseable``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from eval.judge import JudgeConfig, grade_all
from eval.judge_agreement import agreement, human_labels, match_key, review_items
from eval.judge_grades import GRADED, UNPARSEABLE, rates

Progress = Callable[[float, str], None]


def judge_report(
    samples: list[dict],
    models: list[str],
    config: JudgeConfig,
    ratings: list[dict],
    on_progress: Progress | None = None,
) -> dict:
    """Grade ``samples``' answers (``prompt``, ``reference``, ``answers[model]``)
    and check agreement.

    Args:
        samples: the evaluation's per-row table (``eval.report.EvalReport.samples``).
        models: the labels answered ("base" first, then the adapters).
        config: the judge's endpoint and settings.
        ratings: the review queue's rating rows (``feedback.store.FeedbackStore.ratings``).
        on_progress: called with (fraction 0-1, message).

    Returns:
        ``{"judge", "grades": {model: [grade per row]}, "rates": {model: ...}, "agreement",
        "review": {...}, "problem", "seconds"}``.
    """
    progress, start = on_progress or (lambda f, m: None), time.perf_counter()
    items = [(s["prompt"], s["answers"][m], s["reference"]) for m in models for s in samples]
    grades, problem = grade_all(
        config,
        items,
        lambda done, total: progress(0.9 * done / total, f"judge: {done}/{total} answers graded"),
    )
    by_model = {m: grades[k * len(samples) : (k + 1) * len(samples)] for k, m in enumerate(models)}
    labels, counts = human_labels(ratings)
    pairs, matched = _matched(samples, models, by_model, labels)
    review = {"asked": 0, "graded": 0, "ratings": counts, "matched_in_eval": len(matched)}
    if problem is None and config.review_rows:
        kept, review["asked"], problem = _review_pairs(config, ratings, matched)
        review["graded"] = len(kept)
        pairs += kept
    progress(1.0, "judge: done")
    every = [g for gs in by_model.values() for g in gs]
    return {
        "judge": config.describe(),
        "grades": by_model,
        "rates": {m: rates(g) for m, g in by_model.items()},
        "agreement": agreement([h for h, _ in pairs], [int(j) for _, j in pairs]),
        "review": review,
        "problem": problem or garbage_problem(every),
        "seconds": round(time.perf_counter() - start, 3),
    }


def judge_evaluation(report, config: JudgeConfig, on_progress: Progress | None = None) -> dict:
    """:func:`judge_report` on an ``eval.report.EvalReport`` with the review queue's ratings."""
    from feedback.store import FeedbackStore

    progress = on_progress or (lambda f, m: None)
    return judge_report(
        report.samples,
        report.models,
        config,
        FeedbackStore().ratings(),
        lambda f, m: progress(0.95 + 0.04 * f, m),
    )


def _review_pairs(
    config: JudgeConfig, ratings: list[dict], matched: set
) -> tuple[list, int, str | None]:
    """(human, judge passed) for up to ``config.review_rows`` more rated answers of the queue
    (none already matched in the evaluation), how many were asked, and the judge's problem."""
    extra = review_items(ratings, config.review_rows, skip=matched)
    graded, problem = grade_all(config, [(x["question"], x["answer"], None) for x in extra])
    kept = [
        (x["human"], g["passed"])
        for x, g in zip(extra, graded, strict=True)
        if g["status"] == GRADED
    ]
    return kept, len(extra), problem


def _matched(samples, models, by_model, labels) -> tuple[list[tuple[int, bool]], set]:
    """(human, judge passed) for every evaluated answer a person rated, and their keys."""
    pairs, keys = [], set()
    for m in models:
        for s, grade in zip(samples, by_model[m], strict=True):
            key = match_key(s["prompt"], s["answers"][m])
            if key in labels and key not in keys and grade.get("status") == GRADED:
                keys.add(key)
                pairs.append((labels[key], grade["passed"]))
    return pairs, keys


def garbage_problem(grades: list[dict]) -> str | None:
    """A sentence when the judge replied but no reply was the JSON asked for."""
    replied = [g for g in grades if g.get("status") in (GRADED, UNPARSEABLE)]
    if not replied or any(g["status"] == GRADED for g in replied):
        return None
    first = " ".join(str(replied[0].get("reply", "")).split())[:80]
    return (
        f"the judge answered, but none of its {len(replied)} replies was the JSON grade it was "
        f"asked for (all counted unparseable; the first began {first!r})"
    )
