"""The support checks of one evaluation: right intent, hand-offs, invented spans and leaks.

Run by :func:`eval.run.evaluate` on the answers it already generated (nothing is generated
again), stored in report.json under ``support`` and per row under each sample's ``checks``; the
release gate's floors (:mod:`eval.checks.floors`) read them from there.

What the checks learn from, read once from the evaluated file:

- the label column: the slice column when the evaluation is sliced, else the first of
  ``LABEL_COLUMNS`` the file has; without one, the intent and hand-off checks are skipped with a
  sentence naming the column that would enable them;
- "training rows": every row of the file except the evaluated ones (the adapters' training
  split plus the rows nobody used, when the evaluated rows are held out). The intent classifier
  is fitted on their reference answers; the facts they state are what the bot may repeat.

Each adapter is checked with its own gate.json settings (hand-off intents and phrases) and its
own facts file; the base model with the first adapter's settings and no facts file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from eval.checks.handoff import detector, handoff_intents, handoff_rates
from eval.checks.intent import IntentClassifier, fit, rates
from eval.checks.invented import FactSources, counts, read_facts
from finetune.config import DataArgs
from finetune.data import detect_mapping, load_rows
from finetune.data.rows import normalize

LABEL_COLUMNS = ("intent", "category", "tag", "label")


@dataclass
class CheckSettings:
    """One model's check settings: from its gate.json and its folder."""

    handoff_intents: list[str] | None = None  # None: found from the labels
    handoff_phrases: list[str] | None = None  # None: the built-in patterns
    facts: str = ""  # its facts file's text
    facts_problem: str = ""  # why its facts file was not used ("" when fine or absent)


def settings_for(folder: Path | None, rules: dict | None) -> CheckSettings:
    """An adapter's check settings from its rules (gate.json) and facts file."""
    rules = rules or {}
    facts, problem = read_facts(folder)
    return CheckSettings(rules.get("handoff_intents"), rules.get("handoff_phrases"), facts, problem)


def file_rows(
    data: str, column: str | None, mapping: dict | None = None
) -> tuple[dict, str | None]:
    """The file's normalized rows with their label (``rows["label"]``), and the label column.

    Args:
        data: the evaluated file.
        column: the label column to use (the slice column), or None to look for one.
        mapping: the adapter's recorded column mapping (``prompt``/``response``/``messages``).
    """
    ds = load_rows(data)
    if column is None:
        lower = {c.lower(): c for c in ds.column_names}
        column = next((lower[c] for c in LABEL_COLUMNS if c in lower), None)
    mapping = mapping or {}
    args = DataArgs(
        path=str(data),
        prompt_column=mapping.get("prompt"),
        response_column=mapping.get("response"),
        messages_column=mapping.get("messages"),
    )
    rows, _, _ = normalize(
        ds, detect_mapping(ds.column_names, args), Path(str(data)).name, extra=column
    )
    rows["label"] = rows.pop("extra", None) or [None] * len(rows["prompt"])
    return rows, column


def support_checks(
    prompts: list[str],
    references: list[str],
    texts: dict,
    data: str,
    settings: dict,
    column: str | None = None,
    mapping: dict | None = None,
) -> dict:
    """Every model's support checks on the same rows.

    Args:
        prompts: the evaluated rows' prompts; ``references`` their reference answers.
        texts: model -> its answers, in row order.
        data: the evaluated file (labels and training rows are read from it).
        settings: model -> :class:`CheckSettings` (missing: defaults).
        column: the label column (the slice column), or None to find one.
        mapping: the first adapter's recorded column mapping.

    Returns:
        The report's ``support`` part, with ``per_row``: model -> one dict per row.
    """
    start = time.perf_counter()
    rows, column = file_rows(data, column, mapping)
    asked, train = _asked_and_training(rows, prompts, references)
    out = {"column": column, "skipped": {}, "notes": [], "models": {}, "per_row": {}}
    classifier = _classifier(out, rows, train, asked, references)
    sources = {}
    for model, answers in texts.items():
        s = settings.get(model) or CheckSettings()
        if s.facts_problem:
            out["notes"].append(s.facts_problem)
        if s.facts not in sources:
            sources[s.facts] = FactSources(
                [rows["prompt"][i] for i in train], [rows["response"][i] for i in train], s.facts
            )
        out["models"][model], out["per_row"][model] = _one_model(
            answers, prompts, asked, classifier, sources[s.facts], s, out, rows
        )
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


def _asked_and_training(
    rows: dict, prompts: list[str], references: list[str]
) -> tuple[list, list[int]]:
    """Each evaluated row's label (found by its prompt and reference in the file; rows with equal
    content keep the first label), and the file's other rows: the training rows."""
    label_of: dict = {}
    for key in zip(rows["prompt"], rows["response"], rows["label"], strict=True):
        label_of.setdefault(key[:2], key[2])
    evaluated = set(zip(prompts, references, strict=True))
    keys = zip(rows["prompt"], rows["response"], strict=True)
    train = [i for i, key in enumerate(keys) if key not in evaluated]
    return [label_of.get(key) for key in zip(prompts, references, strict=True)], train


def _classifier(out: dict, rows: dict, train: list[int], asked: list, references: list[str]):
    """Fit the intent classifier on the training rows' answers; record it or why it is skipped."""
    if out["column"] is None:
        out["skipped"]["intent"] = out["skipped"]["handoff"] = (
            "the data has no label column: add an `intent` column (or category / tag / label), "
            "or slice by the column that names each row's intent, to check that answers address "
            "the asked intent and that requests for a person are handed off"
        )
        return None
    if not any(label is not None for label in asked):
        out["skipped"]["intent"] = out["skipped"]["handoff"] = (
            f"no evaluated row has a value in the `{out['column']}` column"
        )
        return None
    fitted_on = "the other labelled rows of the file (never the evaluated ones)"
    try:
        classifier = fit([rows["response"][i] for i in train], [rows["label"][i] for i in train])
    except ValueError:
        try:  # a file holding little besides the evaluated rows: fit on everything, and say so
            classifier = fit(rows["response"], rows["label"])
            fitted_on = (
                "every labelled row of the file, the evaluated ones too (too few others): an "
                "optimistic ceiling"
            )
        except ValueError as err:
            out["skipped"]["intent"] = (
                f"the `{out['column']}` column cannot train a classifier: {err}"
            )
            return None
    ceiling = rates(asked, classifier.predict(references))
    out["classifier"] = {
        "rows": classifier.rows,
        "labels": len(classifier.labels),
        "fitted_on": fitted_on,
        "model": "TF-IDF word 1-2 grams + LinearSVC (scikit-learn)",
        "ceiling": ceiling,
    }
    return classifier


def _one_model(
    answers,
    prompts,
    asked,
    classifier: IntentClassifier | None,
    sources: FactSources,
    s: CheckSettings,
    out: dict,
    rows: dict,
) -> tuple[dict, list[dict]]:
    named = classifier.predict(answers) if classifier else [None] * len(answers)
    result, per_row = {"facts": bool(s.facts)}, []
    result["right_intent"] = rates(asked, named) if classifier else None
    handoff = None
    if "handoff" not in out["skipped"]:
        due = handoff_intents(rows["label"], s.handoff_intents)
        out.setdefault("handoff_intents", due)
        handoff = handoff_rates(asked, answers, due, detector(s.handoff_phrases))
        result["handoff"] = {k: v for k, v in handoff.items() if k != "per_row"} | {"intents": due}
    else:
        result["handoff"] = None
    found = [sources.check(p, a) for p, a in zip(prompts, answers, strict=True)]
    result["invented"] = counts([f[0] for f in found])
    result["leaks"] = counts([f[1] for f in found])
    for i, (invented, leaks) in enumerate(found):
        per_row.append(
            {
                "asked": asked[i],
                "intent": named[i],
                "right": None
                if asked[i] is None or named[i] is None
                else named[i] == str(asked[i]),
                "handoff": handoff["per_row"][i] if handoff else "",
                "handoff_due": None
                if handoff is None or asked[i] is None
                else str(asked[i]) in result["handoff"]["intents"],
                "invented": invented,
                "leaks": leaks,
            }
        )
    return result, per_row
