"""Evaluation by slice: every metric and paired CI again, per value of one column (intent, ...).

A report over all rows can hide a kind of request that got worse. Each slice (the rows
sharing one value of the slice column) is scored like the whole set: corpus BLEU, mean
ROUGE-L, perplexity and the golden prompts labelled with that value, for the base and each
adapter, and each adapter's paired bootstrap delta vs base with the same resampling as the
whole-set CIs (``eval.metrics``). The CIs say how large a change is; whether a slice is
``worse`` is a paired randomization test per slice and metric (``eval.significance``), corrected
over all of an adapter's slices and metrics (Benjamini-Hochberg at 2.5 %, the slices' half of the
release gate's 5 %): a change that makes no difference flags no slice, 39 times in 40.

A bootstrap over one or two rows says nothing: slices with fewer than ``MIN_CI_ROWS`` rows
keep their scores and deltas but no CI or test, and say so in ``note``; they are never flagged.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from eval.metrics import (
    bleu_bootstrap_delta_ci,
    bootstrap_delta_ci,
    corpus_bleu,
    perplexity_delta_ci,
)
from eval.significance import SLICE_FALSE_ALARM, benjamini_hochberg, worse_p_values

MIN_CI_ROWS = 5  # fewer rows than this: no CI, never flagged
METRICS = ("bleu", "rouge_l", "perplexity")
LABELS = {"bleu": "BLEU", "rouge_l": "ROUGE-L", "perplexity": "perplexity"}
EMPTY = "(empty)"  # the slice of rows whose column is empty


def slice_scores(
    column: str,
    labels: list,
    texts: dict,
    refs: list[str],
    per_row: dict,
    nll: dict,
    golden: dict,
    golden_fields: list[dict],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict:
    """Scores, deltas and CIs per slice.

    Args:
        column: the slice column's name.
        labels: that column's value for each row (None: empty).
        texts: model -> answers per row, ``"base"`` first.
        refs: the reference answers.
        per_row: model -> {"rouge_l": per-row scores, ...}.
        nll: model -> {"nll": per-row summed NLL, "tokens": per-row scored tokens}.
        golden: the report's golden part (``results`` with each model's check).
        golden_fields: each golden prompt's text fields; its ``column`` value is its slice.

    Returns:
        ``{"column", "min_rows", "confidence", "slices": [one dict per slice, by name]}``.
    """
    if len(labels) != len(refs):
        raise ValueError(f"{len(labels)} slice labels for {len(refs)} rows")
    models = list(texts)
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(EMPTY if label is None else str(label), []).append(i)
    golden_groups: dict[str, list[dict]] = {}
    for result, fields in zip(golden.get("results", []), golden_fields, strict=True):
        if fields.get(column):
            golden_groups.setdefault(str(fields[column]), []).append(result)
    opts = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    rows = [
        _one_slice(
            name,
            np.asarray(idx),
            models,
            texts,
            refs,
            per_row,
            nll,
            golden_groups.get(name, []),
            opts,
        )
        for name, idx in sorted(groups.items())
    ]
    for a in models[1:]:
        _flag_worse(rows, a)
    return {
        "column": column,
        "min_rows": MIN_CI_ROWS,
        "confidence": confidence,
        "false_alarm": SLICE_FALSE_ALARM,
        "slices": rows,
    }


def _flag_worse(rows: list[dict], adapter: str) -> None:
    """Set each slice's ``worse`` for ``adapter``: the metrics whose test stays below the
    false-alarm rate after correcting over every tested slice and metric (``p_adjusted``)."""
    tested = [(s, k) for s in rows for k in METRICS if s["deltas"][adapter][k].get("p") is not None]
    adjusted = benjamini_hochberg([s["deltas"][adapter][k]["p"] for s, k in tested])
    for (s, k), p in zip(tested, adjusted, strict=True):
        s["deltas"][adapter][k]["p_adjusted"] = float(p)
    for s in rows:
        s["worse"][adapter] = [
            k
            for k in METRICS
            if s["deltas"][adapter][k].get("p_adjusted") is not None
            and s["deltas"][adapter][k]["p_adjusted"] <= SLICE_FALSE_ALARM
        ]


def _one_slice(name, idx, models, texts, refs, per_row, nll, golden_results, opts) -> dict:
    sub_refs = [refs[i] for i in idx]
    sub_texts = {m: [texts[m][i] for i in idx] for m in models}
    sub_nll = {
        m: {"nll": np.asarray(nll[m]["nll"])[idx], "tokens": np.asarray(nll[m]["tokens"])[idx]}
        for m in models
    }
    metrics = {
        m: {
            "bleu": corpus_bleu(sub_texts[m], sub_refs),
            "rouge_l": float(np.mean(np.asarray(per_row[m]["rouge_l"])[idx])),
            "perplexity": _perplexity(sub_nll[m]),
            "golden_passed": sum(r["checks"][m]["passed"] for r in golden_results),
        }
        for m in models
    }
    base, n, with_ci = models[0], len(idx), len(idx) >= MIN_CI_ROWS
    deltas, worse = {}, {}
    for a in models[1:]:
        if with_ci:
            found = {
                "bleu": bleu_bootstrap_delta_ci(sub_texts[base], sub_texts[a], sub_refs, **opts),
                "rouge_l": bootstrap_delta_ci(
                    np.asarray(per_row[base]["rouge_l"])[idx],
                    np.asarray(per_row[a]["rouge_l"])[idx],
                    **opts,
                ),
                "perplexity": perplexity_delta_ci(sub_nll[base], sub_nll[a], **opts),
            }
            p = worse_p_values(
                sub_texts[base],
                sub_texts[a],
                sub_refs,
                np.asarray(per_row[base]["rouge_l"])[idx],
                np.asarray(per_row[a]["rouge_l"])[idx],
                sub_nll[base],
                sub_nll[a],
                opts["seed"],
            )
            deltas[a] = {
                k: {"delta": d, "low": lo, "high": hi, "p": p[k]}
                for k, (d, lo, hi) in found.items()
            }
        else:
            deltas[a] = {
                k: {"delta": metrics[a][k] - metrics[base][k], "low": None, "high": None}
                for k in METRICS
            }
        worse[a] = []  # set by _flag_worse once every slice is tested
    note = (
        ""
        if with_ci
        else (
            f"{n} row{'s' if n != 1 else ''}: too few for a CI or test "
            f"(at least {MIN_CI_ROWS} needed); not flagged"
        )
    )
    return {
        "slice": name,
        "rows": n,
        "golden_total": len(golden_results),
        "metrics": metrics,
        "deltas": deltas,
        "worse": worse,
        "note": note,
    }


def _perplexity(nll: dict) -> float:
    tokens = float(np.sum(nll["tokens"]))
    return math.exp(float(np.sum(nll["nll"])) / tokens) if tokens else float("nan")


def is_worse(metric: str, d: dict) -> bool:
    """True when the whole CI of the delta lies on the worse side of 0 (no CI: never)."""
    if d.get("low") is None or d.get("high") is None:
        return False
    return d["low"] > 0 if metric == "perplexity" else d["high"] < 0


def format_delta(metric: str, d: dict) -> str:
    """``+1.23 [+0.50, +2.00]``, or the delta with ``(no CI)`` when the slice is too small."""
    digits = 4 if metric == "rouge_l" else 2
    if d.get("low") is None:
        return f"{d['delta']:+.{digits}f} (no CI)"
    return f"{d['delta']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def table(slices: dict, adapter: str) -> tuple[list[str], list[list]]:
    """One adapter's slice table: columns and rows, flagged slices first."""
    cols = [
        slices["column"],
        "rows",
        "base BLEU",
        f"{adapter} BLEU",
        "Δ BLEU [95% CI]",
        "base ROUGE-L",
        f"{adapter} ROUGE-L",
        "Δ ROUGE-L [95% CI]",
        "base perplexity",
        f"{adapter} perplexity",
        "Δ perplexity [95% CI]",
        "golden (base → tuned)",
        "worse",
        "note",
    ]
    rows = []
    for s in slices["slices"]:
        b, t, d = s["metrics"]["base"], s["metrics"][adapter], s["deltas"][adapter]
        golden = (
            f"{b['golden_passed']}/{s['golden_total']} → {t['golden_passed']}/{s['golden_total']}"
            if s["golden_total"]
            else "—"
        )
        rows.append(
            [
                s["slice"],
                s["rows"],
                round(b["bleu"], 2),
                round(t["bleu"], 2),
                format_delta("bleu", d["bleu"]),
                round(b["rouge_l"], 4),
                round(t["rouge_l"], 4),
                format_delta("rouge_l", d["rouge_l"]),
                round(b["perplexity"], 2),
                round(t["perplexity"], 2),
                format_delta("perplexity", d["perplexity"]),
                golden,
                ", ".join(f"{LABELS[k]} (p {d[k]['p_adjusted']:.3g})" for k in s["worse"][adapter])
                or "—",
                s["note"],
            ]
        )
    rows.sort(key=lambda r: r[12] == "—")  # stable: flagged first, then by slice name
    return cols, rows


def flagged(slices: dict, adapter: str) -> list[dict]:
    """The slices where ``adapter`` is worse than base beyond chance on some metric (corrected)."""
    return [s for s in slices["slices"] if s["worse"].get(adapter)]


def markdown(slices: dict, adapters: list[str]) -> str:
    """The slice tables as Markdown, one per adapter, with the flagged slices named first."""
    out = []
    for a in adapters:
        bad = flagged(slices, a)
        few = sum(1 for s in slices["slices"] if s["note"])
        out += [
            f"## {a} by {slices['column']}: {len(slices['slices'])} slices, "
            f"{len(bad)} worse than base beyond chance (paired randomization tests, corrected over "
            f"every slice and metric, {slices.get('false_alarm', 0.025):.1%} false alarm)"
            + (f", {few} too small for a CI" if few else ""),
            "",
        ]
        for s in bad:
            out.append(
                f"- **{s['slice']}** worse on "
                + ", ".join(
                    f"{LABELS[k]} {format_delta(k, s['deltas'][a][k])}" for k in s["worse"][a]
                )
            )
        cols, rows = table(slices, a)
        out += [""] * bool(bad) + ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
        out.append("")
    return "\n".join(out)


def write_csv(slices: dict, adapters: list[str], path: Path, safe=lambda c: c) -> None:
    """slices.csv: one line per slice and adapter, numbers unrounded, CI bounds and p-values
    (one-sided, raw and corrected) empty when none."""
    header = ["column", "slice", "rows", "adapter", "golden_total", "worse", "note"]
    for k in METRICS:
        header += [
            f"base_{k}",
            f"adapter_{k}",
            f"delta_{k}",
            f"low_{k}",
            f"high_{k}",
            f"p_{k}",
            f"p_adjusted_{k}",
        ]
    header += ["base_golden_passed", "adapter_golden_passed"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for a in adapters:
            for s in slices["slices"]:
                b, t, d = s["metrics"]["base"], s["metrics"][a], s["deltas"][a]
                row = [
                    slices["column"],
                    s["slice"],
                    s["rows"],
                    a,
                    s["golden_total"],
                    " ".join(s["worse"][a]),
                    s["note"],
                ]
                for k in METRICS:
                    row += [
                        b[k],
                        t[k],
                        d[k]["delta"],
                        _blank(d[k]["low"]),
                        _blank(d[k]["high"]),
                        _blank(d[k].get("p")),
                        _blank(d[k].get("p_adjusted")),
                    ]
                row += [b["golden_passed"], t["golden_passed"]]
                writer.writerow([safe(c) for c in row])


def _blank(x):
    return "" if x is None else x
