"""Slicing and per-slice paired CIs on crafted scores, and the gate's rules on them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from adapters.shelf.gate_rules import DEFAULT_RULES
from eval.gate import check
from eval.metrics import bleu_bootstrap_delta_ci, bootstrap_delta_ci, perplexity_delta_ci
from eval.scoring_rows import check_slice_column
from eval.slices import MIN_CI_ROWS, slice_scores, table, write_csv

REF = "your order ships today and you can track it in your account"


def crafted():
    """Slice 'good': the adapter repeats the reference, the base does not; 'bad': the
    reverse; 'tiny': one row. NLL per row: the adapter is better on 'good', worse on 'bad'."""
    labels, base, tuned, refs = [], [], [], []
    for i in range(8):
        labels.append("good")
        refs.append(f"{REF} {i}")
        base.append(f"hello there friend {i}")
        tuned.append(f"{REF} {i}")
    for i in range(7):
        labels.append("bad")
        refs.append(f"{REF} {i}")
        base.append(f"{REF} {i}")
        tuned.append(f"banana {i}")
    labels.append("tiny")
    refs.append(REF)
    base.append(REF)
    tuned.append("no")
    labels.append(None)  # an empty slice value
    refs.append(REF)
    base.append(REF)
    tuned.append(REF)
    n = len(refs)
    tokens = np.full(n, 10)
    base_nll = np.full(n, 20.0)
    tuned_nll = np.array(
        [10.0 if lab == "good" else 30.0 if lab == "bad" else 20.0 for lab in labels]
    )
    from eval.metrics import rouge_l_scores

    texts = {"base": base, "tuned": tuned}
    per_row = {m: {"rouge_l": rouge_l_scores(texts[m], refs)} for m in texts}
    nll = {
        "base": {"nll": base_nll, "tokens": tokens},
        "tuned": {"nll": tuned_nll, "tokens": tokens},
    }
    golden = {
        "total": 2,
        "results": [
            {"id": "g1", "checks": {"base": {"passed": True}, "tuned": {"passed": True}}},
            {"id": "g2", "checks": {"base": {"passed": True}, "tuned": {"passed": False}}},
        ],
    }
    fields = [{"intent": "good"}, {"intent": "bad"}]
    return labels, texts, refs, per_row, nll, golden, fields


@pytest.fixture(scope="module")
def sliced():
    labels, texts, refs, per_row, nll, golden, fields = crafted()
    out = slice_scores("intent", labels, texts, refs, per_row, nll, golden, fields, seed=3)
    return out, (labels, texts, refs, per_row, nll)


def test_every_value_is_a_slice_with_its_rows(sliced):
    out, _ = sliced
    by = {s["slice"]: s for s in out["slices"]}
    assert list(by) == sorted(by) and set(by) == {"good", "bad", "tiny", "(empty)"}
    assert [by[k]["rows"] for k in ("good", "bad", "tiny", "(empty)")] == [8, 7, 1, 1]
    assert out["column"] == "intent" and out["min_rows"] == MIN_CI_ROWS


def test_per_slice_cis_are_the_whole_set_bootstraps_on_the_slice_rows(sliced):
    out, (labels, texts, refs, per_row, nll) = sliced
    for s in out["slices"]:
        if s["rows"] < MIN_CI_ROWS:
            continue
        idx = [i for i, lab in enumerate(labels) if lab == s["slice"]]
        d = s["deltas"]["tuned"]
        want = bootstrap_delta_ci(
            [per_row["base"]["rouge_l"][i] for i in idx],
            [per_row["tuned"]["rouge_l"][i] for i in idx],
            seed=3,
        )
        assert (d["rouge_l"]["delta"], d["rouge_l"]["low"], d["rouge_l"]["high"]) == pytest.approx(
            want
        )
        want = bleu_bootstrap_delta_ci(
            [texts["base"][i] for i in idx],
            [texts["tuned"][i] for i in idx],
            [refs[i] for i in idx],
            seed=3,
        )
        assert (d["bleu"]["delta"], d["bleu"]["low"], d["bleu"]["high"]) == pytest.approx(want)
        sub = {m: {k: np.asarray(v)[idx] for k, v in nll[m].items()} for m in nll}
        want = perplexity_delta_ci(sub["base"], sub["tuned"], seed=3)
        assert (
            d["perplexity"]["delta"],
            d["perplexity"]["low"],
            d["perplexity"]["high"],
        ) == pytest.approx(want)


def test_worse_slices_are_flagged_and_better_ones_not(sliced):
    out, _ = sliced
    by = {s["slice"]: s for s in out["slices"]}
    assert by["bad"]["worse"]["tuned"] == ["bleu", "rouge_l", "perplexity"]
    assert by["good"]["worse"]["tuned"] == []
    assert by["good"]["metrics"]["tuned"]["perplexity"] == pytest.approx(math.exp(1.0))
    assert by["bad"]["deltas"]["tuned"]["rouge_l"]["high"] < 0
    assert by["good"]["deltas"]["tuned"]["rouge_l"]["low"] > 0


def test_a_one_row_slice_says_so_instead_of_a_ci(sliced):
    out, _ = sliced
    tiny = next(s for s in out["slices"] if s["slice"] == "tiny")
    d = tiny["deltas"]["tuned"]["rouge_l"]
    assert d["low"] is None and d["high"] is None and d["delta"] < 0
    assert (
        tiny["note"]
        == f"1 row: too few for a CI or test (at least {MIN_CI_ROWS} needed); not flagged"
    )
    assert tiny["worse"]["tuned"] == []
    cols, rows = table(out, "tuned")
    row = next(r for r in rows if r[0] == "tiny")
    assert row[cols.index("Δ ROUGE-L [95% CI]")].endswith("(no CI)") and "too few" in row[-1]
    assert rows[0][0] == "bad"  # flagged slices first


def test_golden_prompts_counted_in_their_slice(sliced):
    out, _ = sliced
    by = {s["slice"]: s for s in out["slices"]}
    assert by["good"]["golden_total"] == 1 and by["good"]["metrics"]["tuned"]["golden_passed"] == 1
    assert by["bad"]["golden_total"] == 1 and by["bad"]["metrics"]["tuned"]["golden_passed"] == 0
    assert by["tiny"]["golden_total"] == 0


def test_csv_has_one_line_per_slice_and_adapter(sliced, tmp_path):
    import csv

    out, _ = sliced
    write_csv(out, ["tuned"], tmp_path / "slices.csv")
    with open(tmp_path / "slices.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["slice"] for r in rows] == [s["slice"] for s in out["slices"]]
    tiny = next(r for r in rows if r["slice"] == "tiny")
    assert tiny["low_bleu"] == "" and "too few" in tiny["note"]
    assert next(r for r in rows if r["slice"] == "bad")["worse"] == "bleu rouge_l perplexity"


# These reports hold no support checks: the answer-quality floors are switched off, as gate.json
# does for unlabelled data, so the verdicts below are the slices' and golden prompts' own.
RULES = {
    **DEFAULT_RULES,
    "floors": {
        **DEFAULT_RULES["floors"],
        "right_intent_min": None,
        "intent_min": None,
        "handoff_min": None,
    },
}


def fake_report(sliced_part, golden_passed=True, ppl_low=-1.0, base_passed=False):
    out, _ = sliced_part
    checks = {"passed": golden_passed}
    return SimpleNamespace(
        slices=out,
        adapters=["tuned"],
        deltas={
            "tuned": {
                "bleu": {"delta": 1, "low": 0.5, "high": 2},
                "rouge_l": {"delta": 0.1, "low": 0.05, "high": 0.2},
                "perplexity": {"delta": ppl_low + 0.5, "low": ppl_low, "high": ppl_low + 1},
            }
        },
        golden={
            "total": 1,
            "results": [{"id": "g1", "checks": {"base": {"passed": base_passed}, "tuned": checks}}],
        },
    )


def test_gate_fails_on_a_worse_slice_and_names_it(sliced):
    verdict = check(fake_report(sliced), "tuned", dict(RULES))
    assert verdict["state"] == "failed"
    assert len(verdict["reasons"]) == 1 and verdict["reasons"][0].startswith("intent=bad is worse")
    assert any("too few rows" in n and "tiny" in n for n in verdict["notes"])


def test_gate_rules_can_be_relaxed_and_each_rule_bites(sliced):
    relaxed = {**RULES, "slices_not_worse": []}
    assert check(fake_report(sliced), "tuned", relaxed)["state"] == "passed"
    # By default a golden prompt fails the gate only when the base passes it.
    assert check(fake_report(sliced, golden_passed=False), "tuned", relaxed)["state"] == "passed"
    lost = check(fake_report(sliced, golden_passed=False, base_passed=True), "tuned", relaxed)
    assert lost["reasons"] == ["golden prompts the base passes fail: g1 (0/1 passed, base 1/1)"]
    strict = {**relaxed, "golden_all_pass": True, "golden_not_worse": False}
    golden = check(fake_report(sliced, golden_passed=False), "tuned", strict)
    assert golden["reasons"] == ["golden prompts: 0/1 passed (failed: g1)"]
    no_golden = fake_report(sliced)
    no_golden.golden = {"total": 0, "results": []}
    verdict = check(no_golden, "tuned", relaxed)
    assert verdict["state"] == "passed" and any("nothing to compare" in n for n in verdict["notes"])
    ppl = check(fake_report(sliced, ppl_low=0.2), "tuned", relaxed)
    assert ppl["state"] == "failed" and "perplexity is worse" in ppl["reasons"][0]
    unsliced = fake_report(sliced)
    unsliced.slices = {}
    verdict = check(unsliced, "tuned", dict(RULES))
    assert verdict["state"] == "passed" and "not sliced" in verdict["notes"][0]


def test_a_missing_slice_column_is_one_sentence(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a", "response": "b", "intent": "x"}\n')
    check_slice_column(str(data), "intent")
    with pytest.raises(
        ValueError, match=r"^slice column 'topic' is not in d.jsonl \(its columns: "
    ):
        check_slice_column(str(data), "topic")


def test_a_child_version_is_gated_against_its_parent_not_the_base(sliced):
    """Better than the base everywhere, worse than the version it was tuned from: failed,
    and every reason names the parent."""
    report = fake_report(sliced, golden_passed=False)
    report.golden["results"][0]["checks"]["v1"] = {"passed": True}
    report.against = {
        "tuned": {
            "reference": "v1",
            "slices": {},
            "deltas": {
                "bleu": {"delta": -3, "low": -4, "high": -2},
                "rouge_l": {"delta": 0.0, "low": -0.1, "high": 0.1},
                "perplexity": {"delta": 0.4, "low": 0.2, "high": 0.6},
            },
        }
    }
    verdict = check(report, "tuned", dict(RULES))
    assert verdict["state"] == "failed" and verdict["against"] == "v1"
    assert (
        verdict["reasons"][0]
        == "all rows are worse than v1 on BLEU -3.00 [-4.00, -2.00], perplexity +0.40 "
        "[+0.20, +0.60]"
    )
    assert verdict["reasons"][1].startswith("perplexity is worse than v1 beyond its CI")
    assert verdict["reasons"][2] == "golden prompts v1 passes fail: g1 (0/1 passed, v1 1/1)"
    assert (
        check(fake_report(sliced, golden_passed=False), "tuned", dict(RULES))["against"] == "base"
    )


def test_the_gate_says_how_many_checks_it_corrected_over_and_which_slices_are_too_small(sliced):
    verdict = check(fake_report(sliced), "tuned", dict(RULES))
    # the crafted whole-set deltas have no p-value (a report saved before the tests): CI only
    assert (
        "0 whole-set and 6 slice checks, each family corrected at 2.5% (5% false alarm for the "
        "whole gate)" in verdict["notes"]
    )
    # 2 ** -8 <= 0.025 / 6: 'good' (8 rows) could be flagged alone, 'bad' (7) only
    # with its other metrics
    assert (
        "1 slice(s) have fewer than 8 rows, too few for one metric worse on every row to stand "
        "out among 6 slice checks (evaluate more rows per slice): bad" in verdict["notes"]
    )
    assert (
        "(p 0.016 corrected)" in verdict["reasons"][0]
    )  # 1/128 on each metric x 6 checks / 3 flagged


def test_golden_prompts_traded_one_for_one_are_a_note_and_a_net_loss_a_reason(sliced):
    relaxed = {**RULES, "slices_not_worse": [], "perplexity_not_worse": False}

    def golden(*pairs):  # (base passes, tuned passes) per prompt
        return {
            "total": len(pairs),
            "results": [
                {"id": f"g{i}", "checks": {"base": {"passed": b}, "tuned": {"passed": t}}}
                for i, (b, t) in enumerate(pairs, 1)
            ],
        }

    report = fake_report(sliced)
    report.golden = golden((True, False), (False, True), (True, True))
    traded = check(report, "tuned", relaxed)
    assert traded["state"] == "passed" and traded["reasons"] == []
    assert (
        "golden prompts traded, none lost in number: the base passes g1 and this version does not; "
        "this version passes g2 and the base does not (2/3 passed, base 2/3)"
    ) in traded["notes"]
    report.golden = golden((True, False), (True, False), (False, True))
    lost = check(report, "tuned", relaxed)
    assert lost["reasons"] == [
        "golden prompts the base passes fail: g1, g2 (1/3 passed, base 2/3; it gains g3)"
    ]
