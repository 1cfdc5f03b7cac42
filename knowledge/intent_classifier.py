"""Which intent a text is about: a TF-IDF + linear classifier fitted on labelled texts.

The release checks fit it on a dataset's reference answers (``eval.checks.intent``: which
intent an answer addresses); the check before an answer is sent (``knowledge.answer_check``)
fits one on the labelled answers of a knowledge version and one on their questions (which
intent a customer asks about). Word 1-2 grams, sublinear term frequency, scikit-learn's
``LinearSVC``; scikit-learn is imported only when a classifier is fitted.
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
    rows: int  # texts it was fitted on

    def predict(self, texts: list[str]) -> list[str]:
        """The intent each text addresses; ``""`` for an empty text, which addresses none (the
        classifier would name one all the same)."""
        said = [i for i, t in enumerate(texts) if t and t.strip()]
        named = [""] * len(texts)
        if said:
            for i, p in zip(said, self.pipeline.predict([texts[i] for i in said]), strict=True):
                named[i] = str(p)
        return named

    def margins(self, texts: list[str]) -> list[float]:
        """How far each text's named intent leads the runner-up (decision values; 0.0 for an
        empty text): a small margin is a guess between two intents."""
        said = [i for i, t in enumerate(texts) if t and t.strip()]
        out = [0.0] * len(texts)
        if not said:
            return out
        scores = self.pipeline.decision_function([texts[i] for i in said]).tolist()
        for i, row in zip(said, scores, strict=True):
            if not isinstance(row, list):  # two intents: one signed value, its size the lead
                out[i] = abs(float(row))
                continue
            first, second = sorted(row, reverse=True)[:2]
            out[i] = float(first - second)
        return out

    def named(self, text: str) -> tuple[str, float]:
        """``(intent, margin)`` of one text from one pass of the classifier: what
        :meth:`predict` and :meth:`margins` say of it (``("", 0.0)`` for an empty text)."""
        if not (text and text.strip()):
            return "", 0.0
        scores = self.pipeline.decision_function([text])[0]
        classes = [str(c) for c in self.pipeline.classes_]
        if getattr(scores, "ndim", 1) == 0:  # two intents: one signed value, its size the lead
            value = float(scores)
            return classes[1 if value > 0 else 0], abs(value)
        ranked = sorted(zip(scores.tolist(), classes, strict=True), reverse=True)
        return ranked[0][1], float(ranked[0][0] - ranked[1][0])


def fit(texts: list[str], labels: list[str]) -> IntentClassifier:
    """Fit the classifier on labelled texts (rows with an empty label or text left out).

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
