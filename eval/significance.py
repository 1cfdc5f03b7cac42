"""Is an adapter worse than chance would make it? Paired randomization tests, and a correction for
asking the question many times.

The release gate asks of every slice (an intent, ...) and metric whether the adapter is worse
than what it is compared with. Read off 95 % bootstrap CIs one by one, that question flagged a
change that made no difference: on 129 Bitext rows, 5 per intent (27 slices x 3 metrics), an
adapter whose only training was more SFT on reference answers -- better on the whole set on all
three metrics -- failed in 3 intents. Two things made those flags: a bootstrap over 5 rows is
too narrow (all 5 rows of a slice on one side, a 1-in-32 event for each slice and metric, gives
a CI that excludes 0), and ~80 checks at 2.5 % each expect two false flags.

Each check here is a paired randomization test (approximate randomization, as in sacrebleu's
``paired_ar``): if the two models were interchangeable, swapping their outputs on any row would
be as likely as not, so the observed delta is ranked among the deltas of every swap pattern --
all ``2 ** n`` of them up to ``MAX_EXACT_ROWS`` rows, else ``RANDOM_SWAPS`` random ones plus the
observed one. The one-sided p-value is the share of patterns at least as bad as the observed
delta; it is exact for any number of rows, and ``2 ** -n`` at best: five rows can never show,
at 5 %, that anything got worse.

:func:`benjamini_hochberg` then corrects over the checks asked together: a change that makes no
difference is flagged anywhere with probability <= ``q``; when some checks are truly worse, at
most that share of the flagged ones are false, on average. The gate asks two families, each at
half of ``FALSE_ALARM``: the whole-set checks, and the slice checks.
"""

from __future__ import annotations

import numpy as np

from eval.metrics import bleu_from_stats, bleu_row_stats

MAX_EXACT_ROWS = 12  # up to 4096 swap patterns: all of them
RANDOM_SWAPS = 9999  # more rows: this many random patterns, plus the observed one
FALSE_ALARM = 0.05  # the chance a change that makes no difference fails the release gate
# ... split in two: the whole-set checks keep the one-sided 2.5 % a 95 % CI gave them (one strong
# test must not be diluted by ~80 weak ones), the slice checks share the other 2.5 %.
WHOLE_SET_FALSE_ALARM = SLICE_FALSE_ALARM = FALSE_ALARM / 2
_CHUNK = 2048  # swap patterns scored at once (bounds memory on large sets)
_TIE = 1e-9  # deltas this close to the observed one count as "at least as bad"


def swap_patterns(n: int, seed: int = 0) -> np.ndarray:
    """Boolean ``(patterns, n)``: True where a pattern swaps the two models' outputs on a row.

    Every pattern for ``n <= MAX_EXACT_ROWS`` (row 0 swaps nothing); else the unswapped one and
    ``RANDOM_SWAPS`` random ones.
    """
    if n < 1:
        raise ValueError(f"a randomization test needs at least one row; got {n}")
    if n <= MAX_EXACT_ROWS:
        codes = np.arange(2**n)[:, None]
        return ((codes >> np.arange(n)) & 1).astype(bool)
    rng = np.random.default_rng(seed)
    return np.vstack([np.zeros((1, n), bool), rng.random((RANDOM_SWAPS, n)) < 0.5])


def _p_value(deltas: np.ndarray, observed: float, worse_is_higher: bool) -> float:
    """The share of swap patterns whose delta is at least as bad as the observed one."""
    tie = _TIE * max(1.0, abs(observed))
    bad = deltas >= observed - tie if worse_is_higher else deltas <= observed + tie
    return float(np.mean(bad))


def _swapped_sums(ref: np.ndarray, new: np.ndarray, swaps: np.ndarray):
    """Per pattern, the column sums of each model's rows after swapping:
    ``(ref_sums, new_sums)``."""
    ref2, new2 = ref.reshape(len(ref), -1).astype(float), new.reshape(len(new), -1).astype(float)
    outs_ref, outs_new = [], []
    for start in range(0, len(swaps), _CHUNK):
        s = swaps[start : start + _CHUNK].astype(float)
        keep = 1.0 - s
        outs_ref.append(keep @ ref2 + s @ new2)
        outs_new.append(keep @ new2 + s @ ref2)
    return np.vstack(outs_ref), np.vstack(outs_new)


def mean_worse_p(ref_scores, new_scores, seed: int = 0) -> float:
    """p that ``mean(new) - mean(ref)`` is this low by chance (a higher score is
    better: ROUGE-L)."""
    ref, new = np.asarray(ref_scores, float), np.asarray(new_scores, float)
    if ref.shape != new.shape:
        raise ValueError(f"paired scores must match; got {ref.shape} and {new.shape}")
    a, b = _swapped_sums(ref, new, swap_patterns(len(ref), seed))
    return _p_value((b - a)[:, 0] / len(ref), float(new.mean() - ref.mean()), worse_is_higher=False)


def bleu_worse_p(
    ref_texts: list[str], new_texts: list[str], references: list[str], seed: int = 0
) -> float:
    """p that corpus ``BLEU(new) - BLEU(ref)`` is this low by chance; each pattern rescored from
    the rows' n-gram counts (the statistics corpus BLEU sums)."""
    ref, new = bleu_row_stats(ref_texts, references), bleu_row_stats(new_texts, references)
    a, b = _swapped_sums(ref, new, swap_patterns(len(references), seed))
    deltas = np.array(
        [
            bleu_from_stats(nb[None]) - bleu_from_stats(na[None])
            for na, nb in zip(a.round().astype(np.int64), b.round().astype(np.int64), strict=True)
        ]
    )
    return _p_value(deltas, bleu_from_stats(new) - bleu_from_stats(ref), worse_is_higher=False)


def perplexity_worse_p(ref: dict, new: dict, seed: int = 0) -> float:
    """p that ``perplexity(new) - perplexity(ref)`` is this high by chance.

    Args:
        ref, new: ``{"nll": per-row summed NLL, "tokens": per-row scored tokens}`` on the same rows
            (the same reference tokens, so ``tokens`` is taken from ``ref``).
    """
    nll_ref, nll_new = np.asarray(ref["nll"], float), np.asarray(new["nll"], float)
    tokens = float(np.sum(ref["tokens"]))
    a, b = _swapped_sums(nll_ref, nll_new, swap_patterns(len(nll_ref), seed))
    deltas = np.exp(b[:, 0] / tokens) - np.exp(a[:, 0] / tokens)
    observed = float(np.exp(nll_new.sum() / tokens) - np.exp(nll_ref.sum() / tokens))
    return _p_value(deltas, observed, worse_is_higher=True)


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Adjusted p-values (Benjamini-Hochberg): a check is flagged when its adjusted p <= its
    family's false-alarm rate.

    The largest ``k`` with ``p_(k) <= k q / m`` flags the ``k`` smallest; the adjusted value of
    ``p_(i)`` is ``min over j >= i of p_(j) m / j``, capped at 1.
    """
    p = np.asarray(pvalues, float)
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p)
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1].clip(max=1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out


def worse_p_values(
    ref_texts: list[str],
    new_texts: list[str],
    references: list[str],
    ref_rouge_l,
    new_rouge_l,
    ref_nll: dict,
    new_nll: dict,
    seed: int = 0,
) -> dict:
    """``{"bleu", "rouge_l", "perplexity"}``: each metric's p that the new model is this much worse
    by chance, on the same rows (what a report's and a slice's deltas carry as ``p``)."""
    return {
        "bleu": bleu_worse_p(ref_texts, new_texts, references, seed),
        "rouge_l": mean_worse_p(ref_rouge_l, new_rouge_l, seed),
        "perplexity": perplexity_worse_p(ref_nll, new_nll, seed),
    }


def rows_needed(checks: int, q: float = SLICE_FALSE_ALARM) -> int:
    """The fewest rows a slice needs for one worse slice to be flagged among ``checks`` checks
    (every row worse gives p = 2 ** -n; Benjamini-Hochberg's first threshold is q / checks)."""
    return int(np.ceil(np.log2(max(checks, 1) / q)))
