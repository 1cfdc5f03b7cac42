"""The release gate's absolute floors on the support checks, each a sentence with its figure.

Every floor of gate.json's ``floors`` gives one result: held (``ok`` True), broken (False: the
sentence is a reason the gate fails) or not checked (None: the sentence says why, and the gate
does not fail on it; an evaluation without a label column cannot check the intent floors),
unless every answer-quality floor went unchecked (:func:`nothing_checked`). A floor set to
null is switched off and says nothing.
"""

from __future__ import annotations

from adapters.shelf.gate_rules import FLOOR_MIN_INTENT_ROWS
from eval.checks.spans import CONTACT_KINDS


def floor_results(support: dict, model: str, floors: dict, rows: list[dict] = ()) -> list[dict]:
    """``[{"floor", "limit", "figure", "ok", "text"}]``, one per floor that is switched on.

    Args:
        support: the report's ``support`` part.
        model: the adapter checked.
        floors: gate.json's checked ``floors``.
        rows: the model's per-row checks (each sample's ``checks[model]``), for the spans shown.
    """
    found = (support or {}).get("models", {}).get(model)
    skipped = (support or {}).get("skipped", {})
    ceiling = ((support or {}).get("classifier") or {}).get("ceiling") or {}
    out = []
    for name, limit in floors.items():
        if limit is None or name not in _CHECKS:
            continue
        if found is None:
            why = (support or {}).get("error") or "the evaluation ran no support checks"
            out.append(_result(name, limit, None, None, f"{name} {limit} not checked: {why}"))
            continue
        out.append(_CHECKS[name](name, limit, found, rows, skipped, ceiling))
    return out


QUALITY_FLOORS = ("right_intent_min", "intent_min", "handoff_min")  # what answers address
_NAMES = {"right_intent_min": "right intent", "intent_min": "per intent", "handoff_min": "hand-off"}


def nothing_checked(floors: list[dict]) -> str | None:
    """A reason the gate fails when every answer-quality floor switched on (right intent, per
    intent, hand-off) went unchecked: a verdict of "passed" would vouch for answers nobody
    judged (data without labels, a handful of rows). None when one was checked, or all of
    them are switched off (a choice gate.json records)."""
    quality = [f for f in floors if f["floor"] in QUALITY_FLOORS]
    if not quality or any(f["ok"] is not None for f in quality):
        return None
    return (
        "no answer-quality floor could be checked ("
        + ", ".join(_NAMES[f["floor"]] for f in quality)
        + ": each floor says why): the gate passes only on what it checked; evaluate labelled "
        "rows (a column "
        "intent, category, tag or label), enough of them for each floor, or switch those "
        "floors off in gate.json (python -m adapters gate NAME --set "
        "floors.right_intent_min=none ...)"
    )


def _result(name, limit, figure, ok, text) -> dict:
    return {"floor": name, "limit": limit, "figure": figure, "ok": ok, "text": text}


def _right_intent(name, limit, found, rows, skipped, ceiling) -> dict:
    r = found.get("right_intent")
    if not r or r["rate"] is None:
        return _result(
            name,
            limit,
            None,
            None,
            f"right-intent floor {limit:.2f} not checked: "
            + skipped.get("intent", "no labelled row"),
        )
    top = (
        f"; the classifier's ceiling on the references {ceiling['rate']:.2f}"
        if ceiling.get("rate") is not None
        else ""
    )
    figure = f"right-intent rate {r['rate']:.2f} ({r['right']}/{r['rows']} rows{top})"
    ok = r["rate"] >= limit
    return _result(
        name,
        limit,
        r["rate"],
        ok,
        f"{figure} {'reaches' if ok else 'is below'} the floor {limit:.2f}",
    )


def _intent_min(name, limit, found, rows, skipped, ceiling) -> dict:
    r = found.get("right_intent")
    if not r or r["rate"] is None:
        return _result(
            name,
            limit,
            None,
            None,
            f"per-intent floor {limit:.2f} not checked: "
            + skipped.get("intent", "no labelled row"),
        )
    held = {k: v for k, v in r["per_intent"].items() if v["rows"] >= FLOOR_MIN_INTENT_ROWS}
    if not held:
        return _result(
            name,
            limit,
            None,
            None,
            f"per-intent floor {limit:.2f} not checked: no intent has "
            f"{FLOOR_MIN_INTENT_ROWS} evaluated rows (evaluate more rows per intent)",
        )
    low = sorted(held.items(), key=lambda kv: kv[1]["rate"])
    below = [(k, v) for k, v in low if v["rate"] < limit]
    shown = ", ".join(
        f"{k} {v['rate']:.2f} ({v['right']}/{v['rows']})" for k, v in (below or low)[:8]
    )
    if below:
        return _result(
            name,
            limit,
            low[0][1]["rate"],
            False,
            f"{len(below)} intent(s) below the per-intent floor {limit:.2f}: {shown}",
        )
    return _result(
        name,
        limit,
        low[0][1]["rate"],
        True,
        f"lowest intent {shown.split(',')[0]} reaches the "
        f"per-intent floor {limit:.2f} ({len(held)} intents of {FLOOR_MIN_INTENT_ROWS}+ rows)",
    )


def _handoff(name, limit, found, rows, skipped, ceiling) -> dict:
    h = found.get("handoff")
    if not h or h["rate"] is None:
        why = skipped.get("handoff") or (
            "no evaluated row asks for a person (intents: "
            + (", ".join((h or {}).get("intents", [])) or "none found")
            + ")"
        )
        return _result(name, limit, None, None, f"hand-off floor {limit:.2f} not checked: {why}")
    figure = (
        f"hand-off rate {h['rate']:.2f} ({h['given']}/{h['due']} requests for a person handed off; "
        f"{h['unasked']} hand-offs nobody asked for in {h['unasked_rows']} other rows)"
    )
    ok = h["rate"] >= limit
    return _result(
        name,
        limit,
        h["rate"],
        ok,
        f"{figure} {'reaches' if ok else 'is below'} the floor {limit:.2f}",
    )


def _counted(what: str, key: str, part: str):
    def check(name, limit, found, rows, skipped, ceiling) -> dict:
        n = found[part][key]
        hits = [
            [s["text"] for s in r[part] if key == "spans" or s["kind"] in CONTACT_KINDS]
            for r in rows
        ]
        spans = [t for h in hits for t in h]
        shown = f": {', '.join(list(dict.fromkeys(spans))[:6])}" if n else ""
        ok = n <= limit
        return _result(
            name,
            limit,
            n,
            ok,
            f"{n} {what} in {sum(map(bool, hits))} answer(s){shown}, "
            f"{'within' if ok else 'above'} the allowed {int(limit)}",
        )

    return check


_CHECKS = {
    "right_intent_min": _right_intent,
    "intent_min": _intent_min,
    "handoff_min": _handoff,
    "invented_contact_max": _counted(
        "invented contact details (phone, e-mail, URL)", "contact", "invented"
    ),
    "invented_max": _counted("invented spans", "spans", "invented"),
    "leaks_max": _counted("leaked personal data", "spans", "leaks"),
}
