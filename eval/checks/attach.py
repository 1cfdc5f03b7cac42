"""The support checks run on a built report: settings from each adapter's folder, results into
the report (``report.support``, and each sample's ``checks``); with them, how often the check
before an answer is sent would act (``report.support["speak_check"]``, each sample's
``speak_check``: :mod:`eval.checks.speak_check`)."""

from __future__ import annotations

from adapters.shelf.gate_rules import GateRulesError, read_rules
from eval.checks.speak_check import knowledge_of, speak_checks
from eval.checks.support import CheckSettings, settings_for, support_checks


def model_settings(report, shelf) -> dict:
    """Each adapter's check settings from its folder; the base model gets the first adapter's
    hand-off settings and no facts file."""
    settings = {}
    for name in report.adapters:
        try:
            rules = read_rules(shelf.path(name))
        except GateRulesError:
            rules = None  # the gate says gate.json is broken; the checks use the defaults
        settings[name] = settings_for(shelf.path(name), rules)
    first = settings[report.adapters[0]] if report.adapters else CheckSettings()
    settings[report.models[0]] = CheckSettings(first.handoff_intents, first.handoff_phrases)
    return settings


def attach_support(report, rows, data: str, shelf, manifests: dict) -> None:
    """Run the support checks on ``report``'s answers and store them in it.

    Args:
        report: the ``eval.report.EvalReport`` just built (base first).
        rows: the ``eval.scoring_rows.EvalRows`` it scored.
        data: the evaluated file.
        shelf: the shelf the adapters are on (their gate.json and facts file).
        manifests: adapter -> manifest.

    A file the checks cannot read again leaves ``report.support`` with an ``error`` sentence: the
    scores are kept, and the gate says its floors could not be checked.
    """
    settings = model_settings(report, shelf)
    texts = {m: [s["answers"][m] for s in report.samples] for m in report.models}
    try:
        found = support_checks(
            rows.prompts,
            rows.references,
            texts,
            data,
            settings,
            column=rows.slice_by,
            mapping=rows.mapping,
        )
    except (ValueError, OSError) as err:
        report.support = {
            "error": f"the support checks could not read {data}: {' '.join(str(err).split())}",
            "skipped": {},
            "notes": [],
            "models": {},
        }
        attach_speak_check(report, manifests, None)
        return
    per_row = found.pop("per_row")
    for i, sample in enumerate(report.samples):
        sample["checks"] = {m: per_row[m][i] for m in report.models}
    report.support = found
    attach_speak_check(report, manifests, [r["asked"] for r in per_row[report.models[0]]])


def attach_speak_check(report, manifests: dict, asked: list | None) -> None:
    """Count the check's outcomes on ``report``'s answers (``asked``: the rows' labels, or None)
    into ``report.support["speak_check"]`` and each sample's ``speak_check``."""
    texts = {m: [s["answers"][m] for s in report.samples] for m in report.models}
    knowledge = knowledge_of(manifests or {}, report.models, report.adapters)
    found = speak_checks([s["prompt"] for s in report.samples], texts, knowledge, asked)
    per_row = found.pop("per_row")
    found.pop("texts")
    for i, sample in enumerate(report.samples):
        sample["speak_check"] = {m: per_row[m][i] for m in report.models}
    report.support["speak_check"] = found
