"""Paired randomization tests and the Benjamini-Hochberg correction: exact p-values on crafted
rows, each metric's p checked against rescoring every swap pattern by hand, and the property the
release gate needs -- a change that makes no difference is flagged in about 5 % of evaluations,
not in most of them, while one truly worse slice still is."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eval.metrics import bootstrap_delta_ci, corpus_bleu
from eval.significance import (
    FALSE_ALARM,
    RANDOM_SWAPS,
    benjamini_hochberg,
    bleu_worse_p,
    mean_worse_p,
    perplexity_worse_p,
    rows_needed,
    swap_patterns,
)


def test_every_swap_pattern_up_to_twelve_rows_then_random_ones():
    exact = swap_patterns(4)
    assert exact.shape == (16, 4) and len({tuple(r) for r in exact}) == 16 and not exact[0].any()
    many = swap_patterns(20, seed=1)
    assert many.shape == (RANDOM_SWAPS + 1, 20) and not many[0].any()
    assert 0.45 < many[1:].mean() < 0.55
    with pytest.raises(ValueError, match="at least one row"):
        swap_patterns(0)


def test_every_row_worse_gives_two_to_the_minus_n_and_no_change_gives_one():
    base = [0.9, 0.8, 0.7, 0.6, 0.5]
    assert mean_worse_p(base, [b - 0.3 for b in base]) == pytest.approx(1 / 32)
    assert mean_worse_p(base, base) == 1.0
    assert mean_worse_p(base, [b + 0.3 for b in base]) == 1.0  # better on every row
    # A bootstrap over the same 5 rows calls that worse at 95 %, as the gate once did:
    _, _, high = bootstrap_delta_ci(base, [b - 0.3 for b in base])
    assert high < 0
    with pytest.raises(ValueError, match="must match"):
        mean_worse_p([1.0, 2.0], [1.0])


def _by_hand(n, delta_of_swap):
    """Every swap pattern's delta, rescored from scratch: the p-value by its definition."""
    deltas = [delta_of_swap(np.array(s, bool)) for s in itertools.product([False, True], repeat=n)]
    return deltas, deltas[0]


def test_bleu_p_is_corpus_bleu_rescored_on_every_swap():
    refs = [
        "your refund is on its way",
        "the order ships today",
        "we changed your address",
        "call us at any time",
        "your account is closed",
    ]
    old = [
        "your refund is on its way now",
        "the order ships",
        "address changed",
        "call us",
        "closed",
    ]
    new = [
        "refund soon",
        "the order ships today",
        "we changed your address for you",
        "hello",
        "your account",
    ]

    def delta(swap):
        a = [n if s else o for o, n, s in zip(old, new, swap, strict=True)]
        b = [o if s else n for o, n, s in zip(old, new, swap, strict=True)]
        return corpus_bleu(b, refs) - corpus_bleu(a, refs)

    deltas, observed = _by_hand(5, delta)
    expected = np.mean([d <= observed + 1e-9 for d in deltas])
    assert bleu_worse_p(old, new, refs) == pytest.approx(expected)
    assert 0 < expected < 1


def test_perplexity_p_is_perplexity_rescored_on_every_swap():
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 30, size=6)
    ref_nll, new_nll = tokens * rng.uniform(0.8, 1.2, 6), tokens * rng.uniform(0.9, 1.3, 6)

    def delta(swap):
        a, b = np.where(swap, new_nll, ref_nll), np.where(swap, ref_nll, new_nll)
        return np.exp(b.sum() / tokens.sum()) - np.exp(a.sum() / tokens.sum())

    deltas, observed = _by_hand(6, delta)
    expected = np.mean([d >= observed - 1e-9 for d in deltas])
    got = perplexity_worse_p({"nll": ref_nll, "tokens": tokens}, {"nll": new_nll, "tokens": tokens})
    assert got == pytest.approx(expected) and 0 < expected < 1


def test_benjamini_hochberg_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4/1, x4/2, x4/3, x4/4 = 0.02, 0.02, 0.04, 0.04
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg([0.5, 0.9]) == pytest.approx([0.9, 0.9])
    assert benjamini_hochberg([]).size == 0
    assert rows_needed(82, 0.05) == 11  # 2 ** -11 <= 0.05 / 82 < 2 ** -10
    assert rows_needed(81) == 12  # the gate's slices: 81 checks at 2.5 %


def _null_evaluation(rng, slices=27, rows=12):
    """Raw p-values of one evaluation where the adapter is as good as its reference everywhere
    (both answers drawn from the same distribution), for ROUGE-L-like scores and perplexity."""
    ps = []
    for _ in range(slices):
        a, b = rng.uniform(0.1, 0.6, rows), rng.uniform(0.1, 0.6, rows)
        tokens = rng.integers(10, 60, rows)
        ps.append(mean_worse_p(a, b))
        ps.append(
            perplexity_worse_p(
                {"nll": tokens * rng.uniform(0.8, 1.2, rows), "tokens": tokens},
                {"nll": tokens * rng.uniform(0.8, 1.2, rows), "tokens": tokens},
            )
        )
    return np.array(ps)


def test_a_change_that_makes_no_difference_is_rarely_flagged_and_a_worse_slice_is():
    rng = np.random.default_rng(7)
    evaluations = [_null_evaluation(rng) for _ in range(200)]
    corrected = np.mean([(benjamini_hochberg(p) <= FALSE_ALARM).any() for p in evaluations])
    uncorrected = np.mean([(p <= 0.025).any() for p in evaluations])
    assert corrected <= 0.08, corrected  # <= 5 % by construction (0.045 with this seed)
    assert uncorrected >= 0.5, (
        uncorrected
    )  # 54 checks at 2.5 % each: most evaluations flag something
    # The same evaluation with one slice truly worse on every row: that slice, and only it.
    p = _null_evaluation(np.random.default_rng(8))
    good = np.linspace(0.4, 0.6, 12)
    p[0] = mean_worse_p(good, good - 0.2)
    flagged = np.flatnonzero(benjamini_hochberg(p) <= FALSE_ALARM)
    assert flagged.tolist() == [0]
