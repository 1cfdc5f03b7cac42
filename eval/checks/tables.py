"""The support checks as tables: one line per model, one per intent, and the worst answers.

Shared by ``python -m eval``, summary.md and the Evaluate tab, so all three show the same figures.
"""

from __future__ import annotations

from eval.checks.speak_check import lines as speak_lines

OVERVIEW_COLUMNS = [
    "model",
    "right intent",
    "hand-offs given",
    "unasked hand-offs",
    "invented spans",
    "invented contact details",
    "leaks",
]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.2f} ({part}/{whole})" if whole else "—"


def overview(support: dict) -> tuple[list[str], list[list]]:
    """One row per model; the first row is the classifier's ceiling on the reference answers."""
    if not support or not support.get("models"):
        return OVERVIEW_COLUMNS, []
    ceiling = (support.get("classifier") or {}).get("ceiling")
    rows = []
    if ceiling:
        rows.append(
            [
                "reference answers (ceiling)",
                _share(ceiling["right"], ceiling["rows"]),
                "",
                "",
                "",
                "",
                "",
            ]
        )
    for model, found in support["models"].items():
        r, h = found.get("right_intent"), found.get("handoff")
        rows.append(
            [
                model,
                _share(r["right"], r["rows"]) if r else "skipped",
                _share(h["given"], h["due"]) if h else "skipped",
                _share(h["unasked"], h["unasked_rows"]) if h else "skipped",
                found["invented"]["spans"],
                found["invented"]["contact"],
                found["leaks"]["spans"],
            ]
        )
    return OVERVIEW_COLUMNS, rows


def per_intent(support: dict, adapter: str) -> tuple[list[str], list[list]]:
    """One row per intent for ``adapter`` beside the base and the ceiling, lowest first."""
    models = support.get("models", {}) if support else {}
    if adapter not in models or not models[adapter].get("right_intent"):
        return [], []
    base = next(iter(models))
    ceiling = ((support.get("classifier") or {}).get("ceiling") or {}).get("per_intent", {})
    due = set((models[adapter].get("handoff") or {}).get("intents", []))
    cols = [
        "intent",
        "rows",
        f"{adapter} right intent",
        "base right intent",
        "ceiling (references)",
        "asks for a person",
    ]
    rows = []
    for intent, r in models[adapter]["right_intent"]["per_intent"].items():
        b = (
            models[base]["right_intent"]["per_intent"].get(intent)
            if models[base].get("right_intent")
            else None
        )
        c = ceiling.get(intent)
        rows.append(
            [
                intent,
                r["rows"],
                round(r["rate"], 2),
                round(b["rate"], 2) if b else "—",
                round(c["rate"], 2) if c else "—",
                "yes" if intent in due else "",
            ]
        )
    rows.sort(key=lambda row: (row[2], row[0]))
    return cols, rows


def _marked(text: str, spans: list[dict], mark) -> str:
    for s in sorted({s["text"] for s in spans}, key=len, reverse=True):
        text = text.replace(s, mark(s))
    return text


def worst_answers(report, adapter: str, mark=lambda s: f"[[{s}]]") -> tuple[list[str], list[list]]:
    """The rows of ``adapter``'s answers with a problem first: leaks, invented contact details,
    other invented spans, a missed or unasked hand-off, a wrong intent; ``mark`` wraps each
    offending span in the answer (``[[span]]``; the Evaluate tab uses bold)."""
    cols = ["row", "prompt", "asked intent", "answer addressed", "problems", f"{adapter} answer"]
    scored = []
    for s in report.samples:
        c = (s.get("checks") or {}).get(adapter)
        if not c:
            continue
        problems = [f"leak: {x['text']}" for x in c["leaks"]]
        problems += [f"invented {x['kind']}: {x['text']}" for x in c["invented"]]
        due = c.get("handoff_due")
        if due and not c["handoff"]:
            problems.append("no hand-off to a person")
        elif due is False and c["handoff"]:
            problems.append(f"unasked hand-off ({c['handoff']})")
        if c["right"] is False:
            problems.append("wrong intent")
        weight = (
            4 * len(c["leaks"])
            + 2 * len(c["invented"])
            + (c["right"] is False)
            + bool(due and not c["handoff"])
        )
        answer = _marked(s["answers"][adapter], c["leaks"] + c["invented"], mark)
        row = [
            s["index"],
            s["prompt"],
            c["asked"] or "—",
            c["intent"] or "—",
            "; ".join(problems) or "—",
            answer,
        ]
        scored.append((-weight, s["index"], row))
    return cols, [row for *_, row in sorted(scored)]


def markdown(support: dict) -> str:
    """The overview and each adapter's lowest intents as Markdown, with the skip sentences."""
    if not support:
        return ""
    if support.get("error"):
        return f"Support checks not run: {support['error']}"
    cols, rows = overview(support)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    for what, why in (support.get("skipped") or {}).items():
        out.append(f"- {what} check skipped: {why}")
    out += [f"- {note}" for note in support.get("notes", [])]
    if support.get("classifier"):
        k = support["classifier"]
        out.append(
            f"- intent classifier: {k['model']}, fitted on {k['rows']} answers of {k['fitted_on']} "
            f"(`{support['column']}` column, {k['labels']} intents)"
        )
    out += speak_lines(support.get("speak_check"))
    return "\n".join(out)
