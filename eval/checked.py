"""The answers as an alias with ``check: on`` sends them, scored like every other answer.

Each model's served answers (grounded where the evaluation answered it grounded, as an alias
grounded that way serves it; else the plain ones) go through the check before sending, against
the knowledge version they were grounded in (else the one the adapter was trained beside), as
serving checks them
(:func:`eval.checks.speak_check.speak_checks`: kept, answered again from the nearest past
answer of the asked intent, or handed off), and the texts that would be sent get the support
checks: right intent, hand-offs, invented spans (the passages shown and the knowledge's past
answers count as facts), leaks. The gate holds each adapter to its floors on these answers too
(``eval.gate``: the ``checked`` verdict), so a version that passes only when checked may serve
only behind an alias that checks.
"""

from __future__ import annotations

from dataclasses import replace

from eval.checks.attach import model_settings
from eval.checks.speak_check import knowledge_of, speak_checks
from eval.checks.support import support_checks
from knowledge.store import KnowledgeShelf


def section(report, rows, data: str, shelf, manifests: dict, mapping=None) -> dict:
    """``report.checked``: per model, what was checked (``served``: ``off`` or the knowledge
    ``NAME vN`` the answers were grounded in), the outcome counts, and the support checks of
    the texts sent; each sample gets ``checked`` (``answers``, ``outcomes``, ``checks``).

    Returns ``{}`` when no model has knowledge to check against.
    """
    grounding = getattr(report, "grounding", None) or {}
    labels = grounding.get("knowledge") or {}
    knowledge = knowledge_of(manifests or {}, report.models, report.adapters)
    # as serving checks: against the version an answer was grounded in, else the trained-beside
    knowledge.update({m: tuple(label.rsplit(" ", 1)) for m, label in labels.items()})
    if not any(knowledge.values()):
        return {}
    served = {m: _served(report, m, m in labels) for m in report.models}
    found = speak_checks(
        rows.prompts,
        served,
        knowledge,
        [s.get("checks", {}).get(report.models[0], {}).get("asked") for s in report.samples],
    )
    texts, outcomes = found["texts"], found["per_row"]
    settings = model_settings(report, shelf)
    for model, label in labels.items():  # passages the grounded answers were shown are facts
        shown = _shown_texts(report, label)
        settings[model] = replace(
            settings[model], facts="\n".join(x for x in (settings[model].facts, shown) if x)
        )
    checked = support_checks(
        rows.prompts,
        rows.references,
        texts,
        data,
        settings,
        column=rows.slice_by,
        mapping=mapping,
    )
    per_row = checked.pop("per_row")
    for i, sample in enumerate(report.samples):
        sample["checked"] = {
            "answers": {m: texts[m][i] for m in report.models},
            "outcomes": {m: outcomes[m][i] for m in report.models},
            "checks": {m: per_row[m][i] for m in report.models},
        }
    return {
        "models": {
            m: {
                "served": labels.get(m, "off"),
                "outcomes": found["models"][m],
                "support": checked["models"][m],
            }
            for m in report.models
        },
        "skipped": checked.get("skipped", {}),
    }


def _served(report, model: str, grounded: bool) -> list[str]:
    """The model's answers as served: grounded ones where it was answered grounded."""
    out = []
    for sample in report.samples:
        answers = (sample.get("grounded") or {}).get("answers") or {}
        out.append(answers[model] if grounded and model in answers else sample["answers"][model])
    return out


def _shown_texts(report, label: str) -> str:
    """The texts of every passage of knowledge ``label`` ("NAME vN") any row was shown."""
    ids = {
        i
        for s in report.samples
        for i in (s.get("grounded") or {}).get("passages", {}).get(label, [])
    }
    if not ids:
        return ""
    name, version = label.rsplit(" ", 1)
    try:
        passages = dict(KnowledgeShelf().get(name, version).passages_page())
    except ValueError:  # deleted since the grounded answers were made
        return ""
    return "\n".join(passages[i].text for i in sorted(ids) if i in passages)


def rows_table(part: dict) -> list[list]:
    """One row per model: served as, ok / re-answered / handed off, right intent checked."""
    out = []
    for model, found in (part or {}).get("models", {}).items():
        c, right = found["outcomes"], (found["support"].get("right_intent") or {})
        rate = right.get("rate")
        out.append(
            [
                model,
                found["served"],
                c["ok"],
                c["re-answered"],
                c["handed off"],
                c["skipped"],
                None if rate is None else round(rate, 3),
            ]
        )
    return out


COLUMNS = ("model", "grounding", "ok", "re-answered", "handed off", "skipped", "right_intent")


def lines(part: dict) -> list[str]:
    """The section as Markdown: the table, one row per model."""
    if not part:
        return []
    out = [
        "checked before it speaks (the served answers as an alias with check on sends them):",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    return out + [
        "| " + " | ".join("" if c is None else str(c) for c in r) + " |" for r in rows_table(part)
    ]
