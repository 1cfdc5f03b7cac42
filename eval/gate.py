"""The release gate checked on an evaluation: each adapter's rules against its report.

The rules live with the adapter (``gate.json``, :mod:`adapters.shelf.gate_rules`, defaults when
absent). After scoring, :func:`check_gates` turns each adapter's rules into a verdict --
``passed``, or ``failed`` with one reason per broken rule -- and :func:`record_gates` writes
it into the adapter's manifest with the evaluation's id and date. A corrupt gate.json gives
a ``not evaluated`` verdict whose reason is the sentence saying what is wrong; the scores are
still saved.

"Worse" is a statistical question asked many times (each slice and metric, the whole-set
perplexity): each check's paired randomization p-value (``eval.significance``) is corrected within
its family (Benjamini-Hochberg), the whole-set checks at 2.5 % and the slice checks at 2.5 %, so
a change that makes no difference fails the gate on them with probability <= 5 %. The notes say
how many checks that was and which slices are too small for any test to flag. Golden prompts are
counted, not tested: the adapter must pass at least as many as the reference
(``golden_not_worse``; prompts traded one for one are a note), or all of them
(``golden_all_pass``).
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
from eval.checks.floors import floor_results, nothing_checked
from eval.judge_gate import judge_verdict
from eval.significance import (
    FALSE_ALARM,
    SLICE_FALSE_ALARM,
    WHOLE_SET_FALSE_ALARM,
    benjamini_hochberg,
    rows_needed,
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
    checks = []  # (where, metric, delta): every statistical question this gate asks
    if metrics and slices:
        column = slices["column"]
        checks += [
            (f"{column}={s['slice']}", k, s["deltas"][adapter][k])
            for s in slices["slices"]
            if not s["note"]
            for k in metrics
        ]
        few = [s["slice"] for s in slices["slices"] if s["note"]]
        if few:
            notes.append(
                f"{len(few)} slice(s) had too few rows for a CI and were not checked: "
                + ", ".join(few[:10])
                + (" ..." if len(few) > 10 else "")
            )
    elif metrics:
        notes.append("the evaluation was not sliced: the whole set was checked as one slice")
        checks += [(ALL_ROWS, k, deltas[k]) for k in metrics]
    if rules["perplexity_not_worse"]:
        checks.append((WHOLE_SET_PERPLEXITY, "perplexity", deltas["perplexity"]))
    bad = _worse_checks(checks)
    for where in dict.fromkeys(w for w, _, _ in bad):
        found = [(k, d) for w, k, d in bad if w == where]
        if where == WHOLE_SET_PERPLEXITY:
            beyond = "chance" if found[0][1].get("p_adjusted") is not None else "its CI"
            reasons.append(
                f"perplexity is worse than {reference} beyond {beyond}: " + _described(*found[0])
            )
        else:
            verb = "are" if where == ALL_ROWS else "is"
            reasons.append(
                f"{where} {verb} worse than {reference} on "
                + ", ".join(_described(k, d) for k, d in found)
            )
    notes += _power_notes(checks, slices if metrics else None)
    if rules["golden_not_worse"]:
        reasons += _golden_regressions(report, adapter, notes, reference)
    if rules["golden_all_pass"]:
        reasons += _golden_reasons(report, adapter)
    support, rows, grounding = served_support(report, adapter)
    floors = floor_results(support, adapter, rules["floors"], rows)
    not_floors = list(reasons)
    reasons += [f["text"] for f in floors if f["ok"] is False]
    reasons += [r for r in [nothing_checked(floors)] if r]
    if grounding != "off":
        notes.append(_grounded_note(report, adapter, grounding, rules["floors"]))
    judged, judge_notes = judge_verdict(getattr(report, "judge", None), adapter, rules.get("judge"))
    reasons, notes = reasons + judged, notes + judge_notes
    checked = checked_verdict(report, adapter, rules, not_floors + judged)
    return {
        "state": FAILED if reasons else PASSED,
        "reasons": reasons,
        "notes": notes,
        "rules": rules,
        "against": reference,
        # the floors that held or could not be checked, each with its figure
        # (broken ones are reasons)
        "floors": [f["text"] for f in floors if f["ok"] is not False],
        # what the floors were checked on: "off", or the knowledge "NAME vN" the answers were
        # grounded in (an alias that serves the adapter otherwise is judged again)
        "grounding": grounding,
        # the same rules with the floors on the answers as an alias with check on sends them
        # (eval.checked); None when the evaluation could not check them
        "checked": checked,
    }


def checked_verdict(report, adapter: str, rules: dict, other_reasons: list[str]) -> dict | None:
    """The verdict on the served answers checked before they are sent: the reasons that are not
    about the floors (slices, golden prompts, the judge) and the floors on the checked texts.
    None when the report has no checked answers of ``adapter``."""
    part = ((getattr(report, "checked", None) or {}).get("models") or {}).get(adapter)
    if not part:
        return None
    support = {
        **(getattr(report, "support", None) or {}),
        "models": {adapter: part["support"]},
        "skipped": report.checked.get("skipped", {}),
    }
    rows = [s["checked"]["checks"][adapter] for s in report.samples]
    floors = floor_results(support, adapter, rules["floors"], rows)
    reasons = other_reasons + [f["text"] for f in floors if f["ok"] is False]
    reasons += [r for r in [nothing_checked(floors)] if r]
    c = part["outcomes"]
    return {
        "state": FAILED if reasons else PASSED,
        "reasons": reasons,
        "floors": [f["text"] for f in floors if f["ok"] is not False],
        "outcomes": f"ok {c['ok']}, re-answered {c['re-answered']}, handed off "
        f"{c['handed off']}, skipped {c['skipped']} of {c['rows']}",
    }


def served_support(report, adapter: str) -> tuple[dict, list[dict], str]:
    """The support checks of the answers ``adapter`` serves: ``(support part, per-row checks,
    grounding)``.

    An adapter trained beside knowledge is served grounded in it (an alias's ``auto``), or in
    the knowledge an alias names, so when the evaluation answered its rows grounded
    (``report.grounding``: in its own knowledge, or in the one the evaluation chose) the floors
    read those answers and ``grounding`` is that knowledge's ``NAME vN``; otherwise the plain
    answers and ``off``.
    """
    samples = getattr(report, "samples", None) or []
    part = getattr(report, "grounding", None) or {}
    label = (part.get("knowledge") or {}).get(adapter)
    found = (part.get("support") or {}).get(adapter)
    support = getattr(report, "support", None) or {}
    if label and found is not None:
        grounded = {**support, "models": {adapter: found}, "skipped": part.get("skipped", {})}
        rows = [s["grounded"]["checks"][adapter] for s in samples]
        return grounded, rows, label
    rows = [s["checks"][adapter] for s in samples if adapter in s.get("checks", {})]
    return support, rows, "off"


def _grounded_note(report, adapter: str, grounding: str, floors: dict) -> str:
    """Says the floors read the grounded answers, and what the plain ones would have scored."""
    plain = floor_results(getattr(report, "support", None) or {}, adapter, floors)
    figure = next((f["figure"] for f in plain if f["floor"] == "right_intent_min"), None)
    without = f" (without it: right-intent rate {figure:.2f})" if figure is not None else ""
    chosen = (getattr(report, "grounding", None) or {}).get("chosen")
    served = (
        f"as an alias grounded in {grounding.split()[0]} serves this adapter"
        if chosen
        else "as an alias on auto serves this adapter"
    )
    return f"the floors were checked on the answers grounded in {grounding}, {served}{without}"


WHOLE_SET_PERPLEXITY, ALL_ROWS = "whole-set perplexity", "all rows"


def _worse_checks(checks: list[tuple]) -> list[tuple]:
    """The checks that are worse beyond chance, in order.

    Deltas with a randomization p-value (``eval.significance``) are corrected in two families,
    each with Benjamini-Hochberg at half the gate's 5 %: the whole-set checks (which keep the
    strength a one-sided 95 % CI gave them) and the slice checks. A change that makes no
    difference fails the gate on them with probability <= 5 %. A delta without a p-value (a
    report saved before the tests existed) falls back to its own 95 % CI.
    """
    adjusted = {}
    for whole, q in ((True, WHOLE_SET_FALSE_ALARM), (False, SLICE_FALSE_ALARM)):
        family = [
            i
            for i, (where, _, d) in enumerate(checks)
            if d.get("p") is not None and _is_whole_set(where) == whole
        ]
        p = benjamini_hochberg([checks[i][2]["p"] for i in family])
        adjusted.update({i: (float(a), q) for i, a in zip(family, p, strict=True)})
    worse = []
    for i, (where, metric, d) in enumerate(checks):
        if i in adjusted:
            if adjusted[i][0] <= adjusted[i][1]:
                worse.append((where, metric, {**d, "p_adjusted": adjusted[i][0]}))
        elif is_worse(metric, d):
            worse.append((where, metric, d))
    return worse


def _is_whole_set(where: str) -> bool:
    return where in (WHOLE_SET_PERPLEXITY, ALL_ROWS)


def _described(metric: str, d: dict) -> str:
    """``BLEU -3.00 [-4.00, -2.00]``, with the corrected p-value when there is one."""
    p = f" (p {d['p_adjusted']:.2g} corrected)" if d.get("p_adjusted") is not None else ""
    return f"{LABELS[metric]} {format_delta(metric, d)}{p}"


def _power_notes(checks: list[tuple], slices: dict | None) -> list[str]:
    """How many checks were corrected together, and the slices too small to ever be flagged."""
    tested = [where for where, _, d in checks if d.get("p") is not None]
    if not tested:
        return []
    whole = sum(map(_is_whole_set, tested))
    notes = [
        f"{whole} whole-set and {len(tested) - whole} slice checks, each family corrected at "
        f"{SLICE_FALSE_ALARM:.1%} ({FALSE_ALARM:.0%} false alarm for the whole gate)"
    ]
    need = rows_needed(len(tested) - whole)
    small = [
        s["slice"] for s in (slices or {}).get("slices", []) if not s["note"] and s["rows"] < need
    ]
    if small and len(tested) > whole:
        notes.append(
            f"{len(small)} slice(s) have fewer than {need} rows, too few for one metric worse on "
            f"every row to stand out among {len(tested) - whole} slice checks (evaluate more rows "
            "per slice): " + ", ".join(small[:10]) + (" ..." if len(small) > 10 else "")
        )
    return notes


def _golden_regressions(
    report, adapter: str, notes: list[str], reference: str = "base"
) -> list[str]:
    """A reason when the adapter passes fewer golden prompts than ``reference``,
    naming those it lost.

    Prompts traded (as many gained as lost) are a note, not a reason: under greedy decoding any
    retraining moves a few phrase checks both ways (an SFT-only control, better on every
    whole-set metric, lost one of 30 and gained another).
    """
    results = report.golden.get("results", []) if report.golden else []
    if not results:
        notes.append("no golden prompts were checked, so golden_not_worse had nothing to compare")
        return []

    def passes(r, m):
        return bool(r["checks"].get(m, {}).get("passed"))

    lost = [r["id"] for r in results if passes(r, reference) and not passes(r, adapter)]
    if not lost:
        return []
    gained = [r["id"] for r in results if passes(r, adapter) and not passes(r, reference)]
    passed = {m: sum(passes(r, m) for r in results) for m in (reference, adapter)}
    who = "the base" if reference == "base" else reference
    counts = (
        f"{passed[adapter]}/{len(results)} passed, {reference} {passed[reference]}/{len(results)}"
    )
    if len(gained) >= len(lost):
        notes.append(
            f"golden prompts traded, none lost in number: {who} passes {_ids(lost)} and this "
            f"version does not; this version passes {_ids(gained)} and {who} does not ({counts})"
        )
        return []
    also = f"; it gains {_ids(gained)}" if gained else ""
    return [f"golden prompts {who} passes fail: {_ids(lost)} ({counts}{also})"]


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:8]) + (" ..." if len(ids) > 8 else "")


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
            verdicts[name] = {
                "state": NOT_EVALUATED,
                "reasons": [str(err)],
                "notes": [],
                "rules": None,
            }
            continue
        verdicts[name] = check(report, name, rules)
    return verdicts


def record_gates(report, shelf) -> None:
    """Write each checked verdict into its adapter's manifest (``not evaluated`` ones are not)."""
    about = {
        "eval_id": report.eval_id,
        "date": report.created,
        "report": report.folder,
        "data": report.data.get("path"),
        "slice_by": (report.slices or {}).get("column"),
    }
    for name, verdict in report.gate.items():
        if verdict["state"] in (PASSED, FAILED):
            record(shelf, name, verdict, about)


def gate_lines(report) -> list[str]:
    """One line per adapter for the CLI and the Evaluate tab."""
    lines = []
    for name, v in report.gate.items():
        why = "; ".join(v["reasons"]) if v["reasons"] else "every rule holds"
        against = f" against {v['against']}" if v.get("against", "base") != "base" else ""
        held = f"; {'; '.join(v['floors'])}" if v.get("floors") else ""
        grounded = v.get("grounding", "off")
        on = f" on answers grounded in {grounded}" if grounded != "off" else ""
        lines.append(f"release gate of {name}{against}{on}: {v['state']} ({why}{held})")
        checked = v.get("checked")
        if checked:
            why = "; ".join(checked["reasons"]) or "every rule holds"
            held = f"; {'; '.join(checked['floors'])}" if checked["floors"] else ""
            lines.append(
                f"release gate of {name}, checked before it speaks ({checked['outcomes']}): "
                f"{checked['state']} ({why}{held})"
            )
    return lines
