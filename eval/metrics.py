"""Text metrics for support answers: BLEU, ROUGE-L, golden checks, paired bootstrap CIs.

BLEU comes from sacrebleu and ROUGE-L from rouge-score; nothing here re-implements a metric.
`evaluate.load("sacrebleu" / "rouge")` fetches its metric script from the Hub, so it fails
with HF_HUB_OFFLINE=1: the libraries it wraps are called directly instead.

Scales: BLEU is 0-100 (sacrebleu's convention), ROUGE-L F1 is 0-1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
from sacrebleu.metrics import BLEU

# Default 13a tokenizer, corpus-level brevity penalty: the numbers papers report.
_CORPUS_BLEU = BLEU()
# effective_order: a short answer with no 4-gram match still gets a non-zero score.
_SENTENCE_BLEU = BLEU(effective_order=True)


def _check_pairs(predictions: Sequence, references: Sequence, what: str = "predictions") -> None:
    """Raise ValueError unless both sequences are non-empty and of equal length."""
    if len(predictions) == 0 or len(references) == 0:
        raise ValueError(
            f"need at least one {what}/reference pair; got {len(predictions)} {what} "
            f"and {len(references)} references"
        )
    if len(predictions) != len(references):
        raise ValueError(
            f"{what} and references must pair up one to one; got {len(predictions)} {what} "
            f"and {len(references)} references"
        )


def corpus_bleu(predictions: list[str], references: list[str]) -> float:
    """Corpus BLEU (0-100) with sacrebleu's defaults, one reference per prediction.

    Args:
        predictions: Model answers.
        references: The expected answer for each prediction, in the same order.

    Returns:
        sacrebleu corpus BLEU; 100 when every prediction equals its reference.
    """
    _check_pairs(predictions, references)
    return _CORPUS_BLEU.corpus_score(list(predictions), [list(references)]).score


def sentence_bleu(prediction: str, reference: str) -> float:
    """Sentence BLEU (0-100) for one answer, with effective n-gram order."""
    return _SENTENCE_BLEU.sentence_score(prediction, [reference]).score


def sentence_bleu_scores(predictions: list[str], references: list[str]) -> list[float]:
    """Per-sample sentence BLEU (0-100), for per-row deltas in a report."""
    _check_pairs(predictions, references)
    return [sentence_bleu(p, r) for p, r in zip(predictions, references, strict=True)]


@cache
def _rouge_scorer():
    # Imported lazily: rouge-score pulls in nltk, which is slow to import.
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l_scores(predictions: list[str], references: list[str]) -> list[float]:
    """Per-sample ROUGE-L F1 (0-1), Porter-stemmed, one reference per prediction."""
    _check_pairs(predictions, references)
    scorer = _rouge_scorer()
    # RougeScorer.score takes (target, prediction): reference first.
    return [
        scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references, strict=True)
    ]


def rouge_l(predictions: list[str], references: list[str]) -> float:
    """Mean ROUGE-L F1 (0-1) over samples."""
    return float(np.mean(rouge_l_scores(predictions, references)))


def golden_check(answer: str, must_contain: list[str], must_not_contain: list[str]) -> dict:
    """Check an answer against a golden prompt's required and forbidden phrases.

    Matching is a case-insensitive substring test.

    Args:
        answer: The model's answer.
        must_contain: Phrases the answer has to include.
        must_not_contain: Phrases the answer must not include.

    Returns:
        ``{"passed": bool, "missing": [...], "forbidden_found": [...]}``; the lists keep
        the phrases as given, in the given order.
    """
    text = answer.casefold()
    missing = [p for p in must_contain if p.casefold() not in text]
    forbidden = [p for p in must_not_contain if p.casefold() in text]
    return {
        "passed": not missing and not forbidden,
        "missing": missing,
        "forbidden_found": forbidden,
    }


def _paired_bootstrap(
    n: int,
    delta_of: Callable[[np.ndarray], float],
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[float, float, float]:
    """Percentile CI of ``delta_of(indices)`` over resamples of ``range(n)`` with replacement.

    Both systems are scored on the same resampled rows (paired), so row difficulty cancels.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1; got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1; got {confidence}")
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n, size=(n_resamples, n))
    deltas = np.array([delta_of(row) for row in indices])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    return float(delta_of(np.arange(n))), float(low), float(high)


def bootstrap_delta_ci(
    scores_a: list[float],
    scores_b: list[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    statistic: Callable[[np.ndarray], float] = np.mean,
) -> tuple[float, float, float]:
    """Paired bootstrap CI for ``statistic(b) - statistic(a)`` over per-sample scores.

    Args:
        scores_a: Per-sample scores of system A (e.g. the base model), one per row.
        scores_b: Per-sample scores of system B (e.g. the tuned model) on the same rows.
        n_resamples: Bootstrap resamples.
        confidence: Two-sided coverage of the percentile interval.
        seed: Seed for the resampling; equal seeds give equal intervals.
        statistic: Maps a 1-D array of scores to one number (default: the mean).

    Returns:
        ``(delta, low, high)``: the difference on the full set and its CI bounds.
    """
    _check_pairs(scores_a, scores_b, what="scores_a")
    a = np.asarray(scores_a, dtype=float)
    b = np.asarray(scores_b, dtype=float)

    def delta_of(idx: np.ndarray) -> float:
        return float(statistic(b[idx]) - statistic(a[idx]))

    return _paired_bootstrap(len(a), delta_of, n_resamples, confidence, seed)


def bleu_bootstrap_delta_ci(
    predictions_a: list[str],
    predictions_b: list[str],
    references: list[str],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Paired bootstrap CI for the corpus-BLEU difference ``BLEU(b) - BLEU(a)``.

    Corpus BLEU is not a mean of per-row scores, so each resample recomputes it. The
    per-row n-gram counts are extracted once and summed per resample, which is how
    sacrebleu's own paired bootstrap test (``sacrebleu.significance``) does it and gives
    exactly ``corpus_score`` on the resampled rows, far faster than re-tokenizing every
    resample.

    Args:
        predictions_a: Answers of system A (e.g. the base model).
        predictions_b: Answers of system B (e.g. the tuned model), same rows.
        references: Expected answers, same rows.
        n_resamples: Bootstrap resamples.
        confidence: Two-sided coverage of the percentile interval.
        seed: Seed for the resampling.

    Returns:
        ``(delta, low, high)`` in BLEU points (0-100 scale).
    """
    _check_pairs(predictions_a, references, what="predictions_a")
    _check_pairs(predictions_b, references, what="predictions_b")
    stats_a = bleu_row_stats(predictions_a, references)
    stats_b = bleu_row_stats(predictions_b, references)

    def delta_of(idx: np.ndarray) -> float:
        return bleu_from_stats(stats_b[idx]) - bleu_from_stats(stats_a[idx])

    return _paired_bootstrap(len(references), delta_of, n_resamples, confidence, seed)


def bleu_row_stats(predictions: list[str], references: list[str]) -> np.ndarray:
    """Per-row BLEU sufficient statistics, shape (N, 2 + 2 * max_ngram_order)."""
    # Private sacrebleu API, the same calls sacrebleu.significance makes; a test pins
    # bleu_from_stats against corpus_score so a sacrebleu change cannot slip past.
    return np.asarray(
        _CORPUS_BLEU._extract_corpus_statistics(list(predictions), [list(references)]),
        dtype=np.int64,
    )


def bleu_from_stats(stats: np.ndarray) -> float:
    """Corpus BLEU of the rows whose statistics are given."""
    return _CORPUS_BLEU._compute_score_from_stats(stats.sum(axis=0).tolist()).score


def perplexity_delta_ci(
    base: dict, tuned: dict, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Paired bootstrap CI of ``perplexity(tuned) - perplexity(base)`` over rows.

    Resamples rows (not tokens) and recomputes exp(sum NLL / sum tokens) of each resample,
    drawing the same index matrix as ``eval.metrics``' bootstraps for equal seeds.

    Args:
        base: ``{"nll": (N,) summed NLL per row, "tokens": (N,) scored tokens per row}``.
        tuned: the same for the tuned model, same rows.
    """
    nll_a, nll_b = np.asarray(base["nll"], float), np.asarray(tuned["nll"], float)
    tokens = np.asarray(base["tokens"], float)
    n = len(tokens)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))  # (R, N)
    counts = tokens[idx].sum(axis=1)
    deltas = np.exp(nll_b[idx].sum(axis=1) / counts) - np.exp(nll_a[idx].sum(axis=1) / counts)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    full = math.exp(nll_b.sum() / tokens.sum()) - math.exp(nll_a.sum() / tokens.sum())
    return float(full), float(low), float(high)
