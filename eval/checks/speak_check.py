"""How often the check before an answer is sent would act, over an evaluation's answers.

For each model, every evaluated row's answer is checked as a serving alias with ``check: on``
would check it (:func:`knowledge.answer_check.check_answer`, against the knowledge version the
adapter was trained beside; the base model uses the first adapter's): how many answers go out
as they are (``ok``), are answered again from the nearest past answer (``re-answered``), are
handed off to a person (``handed off``), or cannot be checked (``skipped``, with the reason).
Where the rows are labelled, ``re-answered right`` counts the re-answers whose intent (the
customer's, as the check's question classifier named it) is the row's own label. Only counted:
the scores of the report stay those of the answers as generated.
"""

from __future__ import annotations

from knowledge.answer_check import OUTCOMES, CheckResult, check_answer
from knowledge.store import LATEST, KnowledgeShelf


def knowledge_of(manifests: dict, models: list[str], adapters: list[str]) -> dict:
    """Model -> ``(name, version)`` of the knowledge it was trained beside (None: none); the
    base model (first of ``models``) gets the first adapter's."""
    found = {}
    for name in adapters:
        entry = (manifests.get(name) or {}).get("knowledge") or {}
        found[name] = (entry["name"], entry.get("version") or LATEST) if entry.get("name") else None
    if models:
        found[models[0]] = found.get(adapters[0]) if adapters else None
    return found


def speak_checks(
    prompts: list[str],
    texts: dict,
    knowledge: dict,
    asked: list | None = None,
    shelf: KnowledgeShelf | None = None,
) -> dict:
    """Each model's outcome counts, and each row's outcome.

    Args:
        prompts: the evaluated rows' questions.
        texts: model -> its answers, in row order.
        knowledge: model -> ``(name, version)`` to check against, or None.
        asked: each row's label (None: unlabelled), for ``re-answered right``.

    Returns:
        ``{"models": {model: {"knowledge", "rows", "ok", "re-answered", "handed off",
        "skipped", "re-answered right", "note"}}, "per_row": {model: [outcome, ...]},
        "texts": {model: [the answer as it would be sent, ...]}}``.
    """
    shelf = shelf or KnowledgeShelf()
    asked = asked if asked is not None else [None] * len(prompts)
    out = {"models": {}, "per_row": {}, "texts": {}}
    for model, answers in texts.items():
        where = knowledge.get(model)
        results = [_one(q, a, where, shelf) for q, a in zip(prompts, answers, strict=True)]
        counts = {k: sum(r.outcome == k for r in results) for k in OUTCOMES}
        counts["re-answered right"] = sum(
            r.outcome == "re-answered" and y is not None and r.asked == str(y)
            for r, y in zip(results, asked, strict=True)
        )
        notes = sorted({r.note for r in results if r.outcome == "skipped" and r.note})
        out["models"][model] = {
            "knowledge": f"{where[0]} {where[1]}" if where else None,
            "rows": len(results),
            **counts,
            "note": notes[0] if notes else "",
        }
        out["per_row"][model] = [r.outcome for r in results]
        out["texts"][model] = [r.text for r in results]
    return out


def _one(question: str, answer: str, where, shelf) -> CheckResult:
    if where is None:
        why = "not checked: trained beside no knowledge version"
        return CheckResult("skipped", answer, note=why)
    try:
        return check_answer(question, answer, *where, shelf=shelf)
    except ValueError as err:  # the version was deleted since training
        return CheckResult("skipped", answer, note=f"not checked: {err}")


def lines(found: dict | None) -> list[str]:
    """One Markdown line per model: the counts, or why nothing could be checked."""
    if not found or not found.get("models"):
        return []
    out = []
    for model, c in found["models"].items():
        if c["skipped"] == c["rows"]:
            out.append(f"- checked before it speaks, {model}: {c['note'] or 'not checked'}")
            continue
        said = ", ".join(f"{k} {c[k]}" for k in ("ok", "re-answered", "handed off", "skipped"))
        out.append(
            f"- checked before it speaks, {model} ({c['knowledge']}; of {c['rows']} answers): "
            f"{said}; re-answered with the row's intent {c['re-answered right']}"
        )
    return out
