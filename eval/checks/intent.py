"""Which intent an answer addresses: a TF-IDF + linear classifier fitted on labelled answers.

The classifier reads answers, not questions: it is fitted on the reference answers of the
dataset's labelled rows (word 1-2 grams, sublinear term frequency, scikit-learn's
``LinearSVC``). An answer "addresses the asked intent" when the classifier names the row's own
label for it. The classifier is imperfect, so the same rate on the reference answers is reported
beside every figure as its ceiling: an adapter cannot be expected to beat it. Fitting takes
seconds on one core for a dataset of a few thousand rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

MIN_LABELS = 2  # a classifier needs two intents to tell apart
MAX_FIT_ROWS = 50_000  # more labelled answers add seconds, not accuracy


@dataclass
class IntentClassifier:
    """A fitted classifier and what it was fitted on."""

    pipeline: object  # sklearn Pipeline: TfidfVectorizer -> LinearSVC
    labels: list[str]  # the intents it knows
    rows: int  # answers it was fitted on

    def predict(self, texts: list[str]) -> list[str]:
        """The intent each text addresses; ``""`` for an empty text, which addresses none (the
        classifier would name one all the same)."""
        said = [i for i, t in enumerate(texts) if t and t.strip()]
        named = [""] * len(texts)
        if said:
            for i, p in zip(said, self.pipeline.predict([texts[i] for i in said]), strict=True):
                named[i] = str(p)
        return named


def fit(texts: list[str], labels: list[str]) -> IntentClassifier:
    """Fit the classifier on labelled answers (rows with an empty label or text left out).

    Raises:
        ValueError: fewer than two intents, in a sentence that says so.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    pairs = [
        (t, str(y)) for t, y in zip(texts, labels, strict=True) if y is not None and t and t.strip()
    ]
    pairs = pairs[:MAX_FIT_ROWS]
    known = Counter(y for _, y in pairs)
    if len(known) < MIN_LABELS:
        raise ValueError(
            f"{len(pairs)} labelled answers with {len(known)} intent(s): at least "
            f"{MIN_LABELS} intents are needed to tell answers apart"
        )
    # min_df=1: a small dataset's rare but telling words count too.
    pipeline = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LinearSVC())
    pipeline.fit([t for t, _ in pairs], [y for _, y in pairs])
    return IntentClassifier(pipeline=pipeline, labels=sorted(known), rows=len(pairs))


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
