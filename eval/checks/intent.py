"""Which intent an answer addresses: a TF-IDF + linear classifier fitted on labelled answers.

The classifier reads answers, not questions: it is fitted on the reference answers of the
dataset's labelled rows (word 1-2 grams, sublinear term frequency, scikit-learn's
``LinearSVC``). An answer "addresses the asked intent" when the classifier names the row's own
label for it. The classifier is imperfect, so the same rate on the reference answers is reported
beside every figure as its ceiling: an adapter cannot be expected to beat it. Fitting takes
seconds on one core for a dataset of a few thousand rows.
"""

from __future__ import annotations

# The classifier lives with the knowledge shelf, which serving may import (the check before an
# answer is sent uses the same one); the release checks use it from there.
from knowledge.intent_classifier import MAX_FIT_ROWS, MIN_LABELS, IntentClassifier, fit

__all__ = ["MAX_FIT_ROWS", "MIN_LABELS", "IntentClassifier", "fit", "rates"]


def rates(asked: list, named: list[str]) -> dict:
    """Overall and per-intent share of rows whose answer was named the asked intent.

    Args:
        asked: each row's label (None: unlabelled, not counted).
        named: the intent the classifier named for each row's answer.

    Returns:
        ``{"rate", "right", "rows", "per_intent": {intent: {"rate", "right", "rows"}}}``
        (``rate`` None when no row is labelled).
    """
    per: dict[str, list[int]] = {}
    for want, got in zip(asked, named, strict=True):
        if want is None:
            continue
        hit = per.setdefault(str(want), [0, 0])
        hit[0] += str(want) == got
        hit[1] += 1
    right, rows = sum(h[0] for h in per.values()), sum(h[1] for h in per.values())
    return {
        "rate": right / rows if rows else None,
        "right": right,
        "rows": rows,
        "per_intent": {
            k: {"rate": r / n, "right": r, "rows": n} for k, (r, n) in sorted(per.items())
        },
    }
