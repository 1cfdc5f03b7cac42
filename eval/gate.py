"""The release gate checked on an evaluation: each adapter's rules against its report.

The rules live with the adapter (``gate.json``, :mod:`adapters.shelf.gate_rules`, defaults when
absent). After scoring, :func:`check_gates` turns each adapter's rules into a verdict --
``passed``, or ``failed`` with one reason per broken rule -- and :func:`record_gates` writes
it into the adapter's manifest with the evaluation's id and date. A corrupt gate.json gives
a ``not evaluated`` verdict whose reason is the sentence saying what is wrong; the scores are
still saved.
"""

from __future__ import annotations

from adapters.shelf.gate_rules import (
    FAILED,
    NOT_EVALUATED,
    PASSED,
    GateRulesError,
    read_rules,
    record,
)
from eval.slices import LABELS, format_delta, is_worse


def check(report, adapter: str, rules: dict) -> dict:
    """One adapter's verdict: ``{"state", "reasons", "notes", "rules", "against"}``.

    An adapter tuned from another one (``report.against``: a preference run's parent) is
    checked against that version, not the base: it must not have lost what its parent had.

    Args:
        report: an ``eval.report.EvalReport`` that scored ``adapter``.
        rules: checked rules (:func:`adapters.shelf.gate_rules.read_rules`).
    """
    reasons, notes = [], []
    parent = (getattr(report, "against", None) or {}).get(adapter)
    reference = parent["reference"] if parent else "base"
    deltas = parent["deltas"] if parent else report.deltas[adapter]
    slices = parent["slices"] if parent else report.slices
    metrics = rules["slices_not_worse"]
    if metrics and slices:
        column = slices["column"]
        for s in slices["slices"]:
            bad = [k for k in metrics if is_worse(k, s["deltas"][adapter][k])]
            if bad:
                reasons.append(f"{column}={s['slice']} is worse than {reference} on " + ", ".join(
                    f"{LABELS[k]} {format_delta(k, s['deltas'][adapter][k])}" for k in bad))
        few = [s["slice"] for s in slices["slices"] if s["note"]]
        if few:
            notes.append(f"{len(few)} slice(s) had too few rows for a CI and were not checked: "
                         + ", ".join(few[:10]) + (" ..." if len(few) > 10 else ""))
    elif metrics:
        notes.append("the evaluation was not sliced: the whole set was checked as one slice")
        bad = [k for k in metrics if is_worse(k, deltas[k])]
        if bad:
            reasons.append(f"all rows are worse than {reference} on " + ", ".join(
                f"{LABELS[k]} {format_delta(k, deltas[k])}" for k in bad))
    if rules["perplexity_not_worse"] and is_worse("perplexity", deltas["perplexity"]):
        reasons.append(f"perplexity is worse than {reference} beyond its CI: "
                       + format_delta("perplexity", deltas["perplexity"]))
    if rules["golden_not_worse"]:
        reasons += _golden_regressions(report, adapter, notes, reference)
    if rules["golden_all_pass"]:
        reasons += _golden_reasons(report, adapter)
    return {"state": FAILED if reasons else PASSED, "reasons": reasons, "notes": notes,
            "rules": rules, "against": reference}


def _golden_regressions(report, adapter: str, notes: list[str], reference: str = "base") -> list[str]:
    """A reason naming the golden prompts ``reference`` passes and the adapter fails, if any."""
    results = report.golden.get("results", []) if report.golden else []
    if not results:
        notes.append("no golden prompts were checked, so golden_not_worse had nothing to compare")
        return []
    lost = [r["id"] for r in results
            if r["checks"].get(reference, {}).get("passed") and not r["checks"][adapter]["passed"]]
    if not lost:
        return []
    passed = {m: sum(bool(r["checks"].get(m, {}).get("passed")) for r in results)
              for m in (reference, adapter)}
    shown = ", ".join(lost[:8]) + (" ..." if len(lost) > 8 else "")
    who = "the base" if reference == "base" else reference
    return [f"golden prompts {who} passes fail: {shown} ({passed[adapter]}/{len(results)} "
            f"passed, {reference} {passed[reference]}/{len(results)})"]


def _golden_reasons(report, adapter: str) -> list[str]:
    total = report.golden.get("total", 0)
    if not total:
        return ["no golden prompts were checked (the rule golden_all_pass needs them)"]
    failed = [r["id"] for r in report.golden["results"] if not r["checks"][adapter]["passed"]]
    if not failed:
        return []
    shown = ", ".join(failed[:8]) + (" ..." if len(failed) > 8 else "")
    return [f"golden prompts: {total - len(failed)}/{total} passed (failed: {shown})"]


def check_gates(report, shelf) -> dict:
    """Every adapter's verdict against the rules in its folder on ``shelf``."""
    verdicts = {}
    for name in report.adapters:
        try:
            rules = read_rules(shelf.path(name))
        except GateRulesError as err:
            verdicts[name] = {"state": NOT_EVALUATED, "reasons": [str(err)], "notes": [],
                              "rules": None}
            continue
        verdicts[name] = check(report, name, rules)
    return verdicts


def record_gates(report, shelf) -> None:
    """Write each checked verdict into its adapter's manifest (``not evaluated`` ones are not)."""
    about = {"eval_id": report.eval_id, "date": report.created, "report": report.folder,
             "data": report.data.get("path"), "slice_by": (report.slices or {}).get("column")}
    for name, verdict in report.gate.items():
        if verdict["state"] in (PASSED, FAILED):
            record(shelf, name, verdict, about)


def gate_lines(report) -> list[str]:
    """One line per adapter for the CLI and the Evaluate tab."""
    lines = []
    for name, v in report.gate.items():
        why = "; ".join(v["reasons"]) if v["reasons"] else "every rule holds"
        against = f" against {v['against']}" if v.get("against", "base") != "base" else ""
        lines.append(f"release gate of {name}{against}: {v['state']} ({why})")
    return lines
