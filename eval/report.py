"""The evaluation report: scores, paired deltas with CIs, per-sample table, files, manifests.

Deltas are always adapter minus base on the same rows: positive is better for BLEU and
ROUGE-L, negative is better for perplexity. Every CI is a paired bootstrap (1000 resamples,
95 %) over rows, with the same seed, hence the same resamples, for all three metrics. Each
delta also carries ``p``: the one-sided paired randomization test that it is worse
(:mod:`eval.significance`), which the release gate corrects over everything it checks.
With a slice column, the same is done per slice (:mod:`eval.slices`) and saved as slices.csv;
each adapter's release gate verdict (:mod:`eval.gate`) goes into report.json and summary.md.
Saved to ``$TUNEDESK_HOME/evals/<eval_id>/`` (report.json, samples.csv, summary.md, slices.csv)
in one atomic folder write.
"""

from __future__ import annotations

import csv
import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from core import paths
from eval.checks.tables import markdown as support_markdown
from eval.judge_gate import judge_lines
from eval.metrics import (
    bleu_bootstrap_delta_ci,
    bootstrap_delta_ci,
    corpus_bleu,
    golden_check,
    perplexity_delta_ci,
    rouge_l_scores,
    sentence_bleu_scores,
)
from eval.significance import worse_p_values
from eval.slices import markdown as slices_markdown
from eval.slices import slice_scores
from eval.slices import write_csv as write_slices_csv

N_RESAMPLES, CONFIDENCE = 1000, 0.95
METRICS = ("bleu", "rouge_l", "perplexity")


@dataclass
class EvalReport:
    """Everything one paired evaluation found; ``to_dict`` is report.json."""

    eval_id: str
    created: str
    models: list[str]  # "base" first, then the adapters
    metrics: dict  # model -> bleu, rouge_l, perplexity, nll, tokens, golden_passed, ...
    deltas: dict  # adapter -> metric -> {"delta", "low", "high"} (adapter - base)
    samples: list[dict]  # one per row: prompt, reference, answers, scores, deltas
    worse: dict  # adapter -> sample indices whose ROUGE-L dropped, worst first
    golden: dict  # total, passed per model, per-prompt results
    data: dict = field(default_factory=dict)  # path, rows, how they were chosen
    settings: dict = field(default_factory=dict)
    hashes: dict = field(default_factory=dict)  # base weights and adapter hashes
    timings: dict = field(default_factory=dict)  # seconds per phase, rows_per_second
    slices: dict = field(default_factory=dict)  # per-slice scores (eval.slices); {} unsliced
    gate: dict = field(default_factory=dict)  # adapter -> release gate verdict (eval.gate)
    # the support checks (eval.checks): right intent, hand-offs, invented spans, leaks per model;
    # each sample's "checks" holds the same per row
    support: dict = field(default_factory=dict)
    # adapter -> {"reference", "deltas", "slices"}: the same paired deltas against the version
    # it was tuned from (a preference run's parent), which its release gate is checked against
    against: dict = field(default_factory=dict)
    judge: dict = field(
        default_factory=dict
    )  # an LLM judge's grades and agreement (eval.judge_run); {} without
    grounding: dict = field(default_factory=dict)  # with and without grounding (eval.grounded)
    # the served answers as an alias with check on sends them, scored (eval.checked)
    checked: dict = field(default_factory=dict)
    folder: str = ""  # where it was saved; "" when not saved

    @property
    def adapters(self) -> list[str]:
        return self.models[1:]

    def to_dict(self) -> dict:
        return asdict(self)

    def sorted_samples(self, adapter: str, metric: str = "rouge_l", worst_first: bool = True):
        """The per-sample table ordered by ``adapter``'s delta on ``metric`` (bleu, rouge_l)."""
        return sorted(
            self.samples, key=lambda s: s["delta"][adapter][metric], reverse=not worst_first
        )


def build_report(
    rows,
    answers: dict,
    nll: dict,
    golden: list[dict],
    golden_answers: dict,
    seed: int = 0,
    references: dict | None = None,
) -> EvalReport:
    """Score every model's answers and compute each adapter's paired deltas.

    Args:
        rows: the ``eval.scoring_rows.EvalRows`` answered.
        answers: model label -> one ``Generated`` per row; ``"base"`` first.
        nll: model label -> ``{"nll": per-row summed NLL, "tokens": per-row tokens}``.
        golden: golden prompts; ``golden_answers`` holds each model's answers to them.
        seed: bootstrap seed.
        references: adapter -> another scored adapter it is also compared with (its parent):
            the report's ``against``.
    """
    models, refs = list(answers), rows.references
    texts = {m: [a.text for a in answers[m]] for m in models}
    per_row = {
        m: {"bleu": sentence_bleu_scores(texts[m], refs), "rouge_l": rouge_l_scores(texts[m], refs)}
        for m in models
    }
    golden_part = _golden(golden, golden_answers, models)
    metrics = {
        m: _headline(m, texts[m], refs, per_row[m], nll[m], answers[m], golden_part) for m in models
    }
    base = models[0]
    deltas = {
        a: _deltas(texts[base], texts[a], refs, per_row[base], per_row[a], nll[base], nll[a], seed)
        for a in models[1:]
    }
    samples = _samples(rows, texts, per_row, nll, models)
    worse = {
        a: [
            s["index"]
            for s in sorted(samples, key=lambda s: s["delta"][a]["rouge_l"])
            if s["delta"][a]["rouge_l"] < 0
        ]
        for a in models[1:]
    }
    sliced = getattr(rows, "slices", None) is not None

    def slices_of(order: list[str]) -> dict:  # order[0] is what the others are compared with
        if not sliced:
            return {}
        return slice_scores(
            rows.slice_by,
            rows.slices,
            {m: texts[m] for m in order},
            refs,
            per_row,
            nll,
            golden_part,
            [g.get("fields", {}) for g in golden],
            N_RESAMPLES,
            CONFIDENCE,
            seed,
        )

    slices = slices_of(models)
    for s, label in zip(samples, rows.slices, strict=True) if sliced else ():
        s["slice"] = label
    against = {
        a: {
            "reference": ref,
            "deltas": _deltas(
                texts[ref], texts[a], refs, per_row[ref], per_row[a], nll[ref], nll[a], seed
            ),
            "slices": slices_of([ref, a]),
        }
        for a, ref in (references or {}).items()
        if a in models[1:] and ref in models[1:]
    }
    return EvalReport(
        eval_id=f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        models=models,
        metrics=metrics,
        deltas=deltas,
        samples=samples,
        worse=worse,
        golden=golden_part,
        slices=slices,
        against=against,
    )


def _headline(model, texts, refs, per_row, nll, answers, golden_part) -> dict:
    tokens = int(nll["tokens"].sum())
    mean_nll = float(nll["nll"].sum()) / tokens
    return {
        "bleu": corpus_bleu(texts, refs),
        "rouge_l": float(np.mean(per_row["rouge_l"])),
        "perplexity": math.exp(mean_nll),
        "nll": mean_nll,
        "tokens": tokens,
        "golden_passed": golden_part["passed"].get(model, 0),
        "golden_total": golden_part["total"],
        "mean_answer_tokens": float(np.mean([a.tokens for a in answers])),
        "answers_cut": sum(not a.stopped for a in answers),
    }


def _deltas(base_texts, texts, refs, base_rows, rows, base_nll, nll, seed) -> dict:
    opts = {"n_resamples": N_RESAMPLES, "confidence": CONFIDENCE, "seed": seed}
    found = {
        "bleu": bleu_bootstrap_delta_ci(base_texts, texts, refs, **opts),
        "rouge_l": bootstrap_delta_ci(base_rows["rouge_l"], rows["rouge_l"], **opts),
        "perplexity": perplexity_delta_ci(base_nll, nll, **opts),
    }
    p = worse_p_values(
        base_texts, texts, refs, base_rows["rouge_l"], rows["rouge_l"], base_nll, nll, seed
    )
    return {k: {"delta": d, "low": lo, "high": hi, "p": p[k]} for k, (d, lo, hi) in found.items()}


def _samples(rows, texts, per_row, nll, models) -> list[dict]:
    base, samples = models[0], []
    for i, (prompt, ref) in enumerate(zip(rows.prompts, rows.references, strict=True)):
        score = {k: {m: float(per_row[m][k][i]) for m in models} for k in ("bleu", "rouge_l")}
        samples.append(
            {
                "index": i,
                "intent": rows.intents[i],
                "prompt": prompt,
                "reference": ref,
                "answers": {m: texts[m][i] for m in models},
                **score,
                "nll_per_token": {m: float(nll[m]["nll"][i] / nll[m]["tokens"][i]) for m in models},
                "delta": {a: {k: score[k][a] - score[k][base] for k in score} for a in models[1:]},
            }
        )
    return samples


def _golden(golden: list[dict], answers: dict, models: list[str]) -> dict:
    results = []
    for i, g in enumerate(golden):
        checks = {
            m: {
                **golden_check(answers[m][i].text, g["must_contain"], g["must_not_contain"]),
                "answer": answers[m][i].text,
            }
            for m in models
        }
        results.append({"id": g["id"], "prompt": g["prompt"], "checks": checks})
    passed = {m: sum(r["checks"][m]["passed"] for r in results) for m in models}
    return {"total": len(golden), "passed": passed, "results": results}


def save_report(report: EvalReport) -> Path:
    """Write report.json, samples.csv and summary.md into ``evals/<eval_id>/`` atomically."""
    target = paths.subdir("evals") / paths.safe_name(report.eval_id, "eval id")
    report.folder = str(target)
    with paths.atomic_dir(target) as tmp:
        (tmp / "report.json").write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        _write_csv(report, tmp / "samples.csv")
        (tmp / "summary.md").write_text(summary_markdown(report))
        if report.slices:
            write_slices_csv(report.slices, report.adapters, tmp / "slices.csv", csv_safe)
    return target


def _write_csv(report: EvalReport, path: Path) -> None:
    header = ["index", "intent", "prompt", "reference"]
    for m in report.models:
        header += [f"answer_{m}", f"bleu_{m}", f"rouge_l_{m}"]
    for a in report.adapters:
        header += [f"delta_bleu_{a}", f"delta_rouge_l_{a}"]
    if report.slices:
        header.append(f"slice_{report.slices['column']}")
    checked = [m for m in report.models if m in (report.support or {}).get("models", {})]
    for m in checked:  # the support checks per row: the intent addressed, the offending spans
        header += [f"addressed_intent_{m}", f"invented_{m}", f"leaks_{m}"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for s in report.samples:
            row = [s["index"], s["intent"] or "", s["prompt"], s["reference"]]
            for m in report.models:
                row += [s["answers"][m], round(s["bleu"][m], 4), round(s["rouge_l"][m], 4)]
            for a in report.adapters:
                row += [round(s["delta"][a]["bleu"], 4), round(s["delta"][a]["rouge_l"], 4)]
            if report.slices:
                row.append(s.get("slice") or "")
            for m in checked:
                c = s.get("checks", {}).get(m) or {}
                row += [
                    c.get("intent") or "",
                    " | ".join(x["text"] for x in c.get("invented", [])),
                    " | ".join(x["text"] for x in c.get("leaks", [])),
                ]
            writer.writerow([csv_safe(cell) for cell in row])


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(cell):
    """Text that a spreadsheet would run as a formula gets a leading ``'`` (numbers stay numbers).

    Prompts and answers come from users and models: ``=HYPERLINK(...)`` or ``+cmd|...`` in a
    cell must show as text when someone opens samples.csv in Excel or LibreOffice.
    """
    if isinstance(cell, str) and cell.startswith(_FORMULA_START):
        return "'" + cell
    return cell


def write_back(report: EvalReport) -> None:
    """Merge the headline numbers into each adapter's manifest under ``eval``."""
    from adapters.shelf.store import Shelf

    shelf, base = Shelf(), report.metrics[report.models[0]]
    keys = ("bleu", "rouge_l", "perplexity", "golden_passed", "golden_total")
    for name in report.adapters:
        m = report.metrics[name]
        shelf.write_manifest_fields(
            name,
            {
                "eval": {
                    "eval_id": report.eval_id,
                    "date": report.created,
                    "data": report.data.get("path"),
                    "rows": report.data.get("rows"),
                    "held_out": report.data.get("held_out"),
                    **{k: m[k] for k in keys},
                    "base": {k: base[k] for k in keys},
                    "delta": report.deltas[name],
                    "report": report.folder,
                }
            },
        )


def _ci(d: dict, digits: int) -> str:
    return f"{d['delta']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def metrics_table(report: EvalReport) -> str:
    """Markdown table: one line per model, deltas vs base with 95 % CIs for adapters."""
    lines = [
        "| model | BLEU | ROUGE-L | perplexity | golden | Δ BLEU [95% CI] "
        "| Δ ROUGE-L [95% CI] | Δ perplexity [95% CI] |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in report.models:
        x = report.metrics[m]
        d = report.deltas.get(m)
        cells = (
            [_ci(d["bleu"], 2), _ci(d["rouge_l"], 4), _ci(d["perplexity"], 2)] if d else ["—"] * 3
        )
        lines.append(
            f"| {m} | {x['bleu']:.2f} | {x['rouge_l']:.4f} | {x['perplexity']:.2f} "
            f"| {x['golden_passed']}/{x['golden_total']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def summary_markdown(report: EvalReport, worst: int = 5) -> str:
    """A readable page: what was scored, the metric table, timings, the worst samples."""
    g, t = report.settings.get("generation", {}), report.timings
    out = [
        f"# Evaluation {report.eval_id}",
        "",
        f"- Date: {report.created}",
        f"- Data: `{report.data.get('path')}`, {report.data.get('rows')} rows: "
        f"{report.data.get('selection')}",
        f"- Base model: {report.hashes.get('base_model', {}).get('name')}",
        f"- Generation: max_new_tokens {g.get('max_new_tokens')}, temperature "
        f"{g.get('temperature')}, batch {report.settings.get('batch_size')} prompts per call",
        f"- Answers: {engine_line(report)}",
        f"- Time: {t.get('total_seconds')} s, {t.get('rows_per_second')} rows/s",
        "",
        metrics_table(report),
        "",
        "Deltas are adapter − base on the same rows (higher is better for BLEU and ROUGE-L, "
        "lower for perplexity); a CI that excludes 0 is a difference the data supports.",
        "",
    ]
    for a, verdict in report.gate.items():
        out += [
            f"- Release gate of {a}: **{verdict['state']}**"
            + "".join(
                f"\n  - {r}" for r in [*verdict.get("reasons", []), *verdict.get("floors", [])]
            )
        ]
        checked = verdict.get("checked")
        if checked:
            out.append(
                f"- Release gate of {a}, checked before it speaks: **{checked['state']}**"
                + "".join(f"\n  - {r}" for r in [*checked["reasons"], *checked["floors"]])
            )
    out.append("")
    if report.grounding:
        from eval.grounded import lines as grounding_lines

        out += [*grounding_lines(report.grounding), ""]
    if report.checked:
        from eval.checked import lines as checked_lines

        out += [*checked_lines(report.checked), ""]
    if report.judge:
        out += [*judge_lines(report.judge, report.gate), ""]
    if report.slices:
        out += [slices_markdown(report.slices, report.adapters), ""]
    if report.support:
        out += ["## Support checks", "", support_markdown(report.support), ""]
    for a in report.adapters:
        out += [
            f"## Where {a} got worse (ROUGE-L), {len(report.worse[a])} of "
            f"{len(report.samples)} rows",
            "",
        ]
        for i in report.worse[a][:worst]:
            s = report.samples[i]
            out.append(
                f"- row {i} (Δ ROUGE-L {s['delta'][a]['rouge_l']:+.3f}): {_short(s['prompt'])}"
            )
        out.append("")
    return "\n".join(out)


def engine_line(report: EvalReport) -> str:
    """Which engine answered (perplexity is always PyTorch's), and why, when ``auto`` fell back."""
    engine = report.settings.get("engine") or {"label": "pytorch"}  # reports from before engines
    note = f" ({engine['note']})" if engine.get("note") else ""
    return f"answered by {engine['label']}{note}; perplexity by PyTorch"


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
