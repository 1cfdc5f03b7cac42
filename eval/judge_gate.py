"""The judge in the release gate: does it count, and what does it say of each adapter.

:func:`judge_verdict` is called by :func:`eval.gate.check` for every adapter. The judge counts
only when the evaluation asked one (``report.judge``), it answered, it agreed with people on
enough rated answers (gate.json's ``judge.min_rated``, ``judge.min_kappa``) and its replies to
this adapter were readable often enough (``judge.max_unparseable_rate``). Then every rate floor
the adapter misses is a reason the gate fails, with its figure; otherwise the note says the
judge was ignored and why, with the kappa it reached.
"""

from __future__ import annotations

from adapters.shelf.judge_rules import DEFAULT_JUDGE_RULES, RATE_FLOORS

ITEM_WORDS = {
    "addresses": "address the question",
    "correct": "are correct",
    "polite": "are polite",
    "safe": "are safe",
}


def judge_counts(judge: dict | None, rules: dict | None = None) -> tuple[bool, str]:
    """``(counts, sentence)``: whether the gate may use the judge at all, and why (not)."""
    rules = {**DEFAULT_JUDGE_RULES, **(rules or {})}
    if not judge:
        return False, "no judge was asked"
    who = f"the judge ({judge['judge']['model']})"
    if judge.get("problem"):
        return False, f"{who} was ignored: {judge['problem']}"
    a = judge["agreement"]
    if a["n"] < rules["min_rated"]:
        return False, (
            f"{who} was ignored: only {a['n']} answers were rated by both people and the judge "
            f"(at least {rules['min_rated']} needed; grade more review-queue ratings with "
            "--judge-review-rows or `python -m eval judge-check`)"
        )
    if a["kappa"] is None or a["kappa"] < rules["min_kappa"]:
        figure = f"kappa {a['kappa']:.2f}" if a["kappa"] is not None else f"kappa {a['kappa_note']}"
        return False, (
            f"{who} was ignored: its agreement with people is {figure} on {a['n']} rated answers "
            f"(raw {a['raw']:.0%}), below the floor of {rules['min_kappa']:g}"
        )
    return True, (
        f"{who} counts: kappa {a['kappa']:.2f} with people on {a['n']} rated answers "
        f"(raw agreement {a['raw']:.0%}, floor {rules['min_kappa']:g})"
    )


def judge_verdict(
    judge: dict | None, adapter: str, rules: dict | None = None
) -> tuple[list[str], list[str]]:
    """``(reasons, notes)`` the judge adds to ``adapter``'s gate verdict.

    Args:
        judge: the report's ``judge`` (:func:`eval.judge_run.judge_report`), or None.
        adapter: the adapter whose verdict this is.
        rules: gate.json's checked ``judge`` object (defaults when None).
    """
    if not judge:
        return [], []
    rules = {**DEFAULT_JUDGE_RULES, **(rules or {})}
    counts, sentence = judge_counts(judge, rules)
    if not counts:
        return [], [sentence]
    r = judge["rates"].get(adapter)
    if not r or not r["graded"]:
        return [], [f"{sentence}, but it graded none of {adapter}'s answers, so it was not used"]
    if r["unparseable_rate"] is not None and r["unparseable_rate"] > rules["max_unparseable_rate"]:
        return [], [
            f"{sentence}, but {r['unparseable_rate']:.0%} of its replies on {adapter}'s answers "
            f"were unparseable (at most {rules['max_unparseable_rate']:.0%}), so it was not used"
        ]
    reasons = []
    for floor in RATE_FLOORS:
        item = floor.removeprefix("min_").removesuffix("_rate")
        rate = r[f"{item}_rate"]
        if rate < rules[floor]:
            reasons.append(
                f"judge: {rate:.0%} of answers {ITEM_WORDS[item]} "
                f"({round(rate * r['graded'])}/{r['graded']} graded; floor {rules[floor]:.0%})"
            )
    return reasons, [f"{sentence}; {rates_text(r)}"]


def rates_text(r: dict) -> str:
    """``addresses 91%, correct 80%, polite 99%, safe 100% of 100 graded (2 unparseable)``."""
    if not r["graded"]:
        return f"none of {r['answers']} answers graded"
    shown = ", ".join(f"{k} {r[f'{k}_rate']:.0%}" for k in ITEM_WORDS)
    left = [f"{r[k]} {k.replace('_', ' ')}" for k in ("unparseable", "failed", "not_asked") if r[k]]
    return f"{shown} of {r['graded']} graded" + (f" ({', '.join(left)})" if left else "")


def judge_lines(judge: dict | None, gate: dict | None = None) -> list[str]:
    """The CLI's lines: the judge's rates per model, its agreement with people and, per adapter
    whose rules were read (``gate``: the report's verdicts), whether its gate used the judge."""
    if not judge:
        return []
    lines = [f"judge {judge['judge']['model']} at {judge['judge']['url']} ({judge['seconds']} s):"]
    lines += [f"  {m}: {rates_text(r)}" for m, r in judge["rates"].items()]
    a, review = judge["agreement"], judge["review"]
    kappa = f"kappa {a['kappa']:.2f}" if a["kappa"] is not None else f"kappa {a['kappa_note']}"
    raw = f", raw agreement {a['raw']:.0%}" if a["raw"] is not None else ""
    lines.append(
        f"  agreement with people: {a['n']} rated answers ({review['matched_in_eval']} from this "
        f"evaluation, {review['graded']} from the review queue){raw}, {kappa}"
    )
    if judge.get("problem"):
        lines.append(f"  problem: {judge['problem']}; everything else was evaluated and saved")
    for name, verdict in (gate or {}).items():
        if verdict.get("rules"):
            lines.append(
                f"  release gate of {name}: {judge_counts(judge, verdict['rules'].get('judge'))[1]}"
            )
    return lines
