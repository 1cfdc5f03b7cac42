import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

from eval.metrics import (
    bleu_bootstrap_delta_ci,
    bootstrap_delta_ci,
    corpus_bleu,
    golden_check,
    rouge_l,
    rouge_l_scores,
    sentence_bleu,
    sentence_bleu_scores,
)

PREDS = [
    "You can track your order with the tracking link in your email.",
    "I have cancelled the order; a confirmation email is on its way.",
    "Your invoices are listed in your account under Orders.",
    "We accept credit cards and PayPal.",
]
REFS = [
    "You can track your order using the link in the confirmation email.",
    "I have cancelled your order and you will get an email shortly.",
    "Your invoice is in your account under Orders.",
    "We accept credit cards, PayPal and bank transfer.",
]


def test_identical_texts_score_perfectly():
    assert corpus_bleu(REFS, REFS) == pytest.approx(100.0)
    assert sentence_bleu(REFS[0], REFS[0]) == pytest.approx(100.0)
    assert rouge_l(REFS, REFS) == pytest.approx(1.0)


def test_bleu_matches_a_direct_sacrebleu_call():
    expected = BLEU().corpus_score(PREDS, [REFS]).score
    assert 0 < expected < 100
    assert corpus_bleu(PREDS, REFS) == pytest.approx(expected)
    direct = [
        BLEU(effective_order=True).sentence_score(p, [r]).score
        for p, r in zip(PREDS, REFS, strict=True)
    ]
    assert sentence_bleu_scores(PREDS, REFS) == pytest.approx(direct)


def test_rouge_l_matches_a_direct_rouge_score_call():
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    direct = [scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(PREDS, REFS, strict=True)]
    assert all(0 < d < 1 for d in direct)
    assert rouge_l_scores(PREDS, REFS) == pytest.approx(direct)
    assert rouge_l(PREDS, REFS) == pytest.approx(np.mean(direct))


@pytest.mark.parametrize("fn", [corpus_bleu, rouge_l, rouge_l_scores, sentence_bleu_scores])
def test_empty_or_mismatched_inputs_raise(fn):
    with pytest.raises(ValueError, match="at least one"):
        fn([], [])
    with pytest.raises(ValueError, match="one to one"):
        fn(["a b"], ["a b", "c d"])


def test_golden_check_is_case_insensitive_and_lists_what_failed():
    answer = "Sorry! I have issued a REFUND to your card."
    ok = golden_check(answer, ["refund", "sorry"], ["password"])
    assert ok == {"passed": True, "missing": [], "forbidden_found": []}
    bad = golden_check(answer, ["Refund", "tracking number"], ["Card", "password"])
    assert bad == {"passed": False, "missing": ["tracking number"], "forbidden_found": ["Card"]}
    assert golden_check("anything", [], [])["passed"]


def test_bootstrap_of_identical_systems_is_zero():
    scores = [0.1, 0.5, 0.9, 0.3, 0.7]
    assert bootstrap_delta_ci(scores, scores) == (0.0, 0.0, 0.0)
    delta, low, high = bleu_bootstrap_delta_ci(PREDS, PREDS, REFS, n_resamples=50)
    assert delta == 0.0 and low <= 0.0 <= high


def test_bootstrap_of_a_clearly_better_system_is_above_zero():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.0, 0.5, size=60)
    b = a + rng.uniform(0.1, 0.3, size=60)
    delta, low, high = bootstrap_delta_ci(a.tolist(), b.tolist())
    assert delta == pytest.approx(np.mean(b - a))
    assert 0 < low <= delta <= high
    worse = ["no idea", "cannot help", "ask someone else", "error"]
    delta, low, high = bleu_bootstrap_delta_ci(worse, PREDS, REFS, n_resamples=200)
    assert delta == pytest.approx(corpus_bleu(PREDS, REFS) - corpus_bleu(worse, REFS))
    assert 0 < low <= high


def test_bootstrap_is_deterministic_with_a_seed():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(size=30).tolist(), rng.uniform(size=30).tolist()
    assert bootstrap_delta_ci(a, b, seed=3) == bootstrap_delta_ci(a, b, seed=3)
    assert bootstrap_delta_ci(a, b, seed=3) != bootstrap_delta_ci(a, b, seed=4)
    first = bleu_bootstrap_delta_ci(PREDS[::-1], PREDS, REFS, n_resamples=50, seed=5)
    assert first == bleu_bootstrap_delta_ci(PREDS[::-1], PREDS, REFS, n_resamples=50, seed=5)


def test_bootstrap_statistic_and_argument_checks():
    a, b = [0.0, 0.0, 0.0, 10.0], [1.0, 1.0, 1.0, 1.0]
    assert bootstrap_delta_ci(a, b, statistic=np.median)[0] == 1.0
    with pytest.raises(ValueError, match="one to one"):
        bootstrap_delta_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_delta_ci([], [])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_delta_ci(a, b, confidence=1.5)
    with pytest.raises(ValueError, match="one to one"):
        bleu_bootstrap_delta_ci(PREDS, PREDS[:2], REFS)


def test_bleu_resamples_equal_corpus_bleu_on_the_resampled_rows():
    # Pins the sufficient-statistics shortcut to sacrebleu's public corpus_score.
    from eval.metrics import bleu_from_stats, bleu_row_stats

    stats = bleu_row_stats(PREDS, REFS)
    for idx in ([0, 0, 1, 3], [2, 2, 2, 1], [3, 1, 0, 2]):
        expected = corpus_bleu([PREDS[i] for i in idx], [REFS[i] for i in idx])
        assert bleu_from_stats(stats[idx]) == pytest.approx(expected)


_WORDS = st.text(alphabet=string.ascii_letters + string.digits + " .,!?'-", max_size=60)
_ALNUM = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_WORDS, _WORDS), min_size=1, max_size=4))
def test_scores_stay_in_range(pairs):
    preds, refs = [p for p, _ in pairs], [r for _, r in pairs]
    assert 0.0 <= corpus_bleu(preds, refs) <= 100.0 + 1e-9
    assert all(0.0 <= s <= 100.0 + 1e-9 for s in sentence_bleu_scores(preds, refs))
    assert 0.0 <= rouge_l(preds, refs) <= 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(_ALNUM, min_size=1, max_size=8).map(" ".join))
def test_rouge_l_of_a_text_with_itself_is_one(text):
    assert rouge_l([text], [text]) == pytest.approx(1.0)
