"""An adapter's release gate: its rules (``gate.json`` in its folder) and its recorded verdict.

The rules say what an evaluation must show before the adapter ships; ``eval.gate`` checks them
after scoring and records the verdict in the adapter's manifest under ``gate`` (as
``eval.report.write_back`` records the scores under ``eval``). This module only reads and
writes both, so the shelf, export and serving (this layer) can say whether an adapter passed
without importing ``eval``.

A recorded verdict counts only while nothing it was about has changed: the weights (the
manifest's ``adapter_hash``, else the file's own sha256) and the rules (their hash). An adapter
trained again or edited afterwards, or whose gate.json changed, is "not evaluated" again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from adapters.shelf.integrity import cached_hash
from adapters.shelf.judge_rules import DEFAULT_JUDGE_RULES, check_judge_rules
from adapters.shelf.manifest import WEIGHTS, BrokenAdapterError, read_json, write_json_atomic

GATE_FILE = "gate.json"
FORMAT = "tunedesk-gate/1"
GATE_METRICS = ("bleu", "rouge_l", "perplexity")
DEFAULT_RULES = {
    # No slice (or, unsliced, the whole set) may be worse than base beyond chance on these
    # (eval.significance: paired randomization tests, corrected over all the gate's checks).
    "slices_not_worse": list(GATE_METRICS),
    # The adapter passes at least as many golden prompts as the base (or the parent it was tuned
    # from); the prompts it lost are named either way. Counted, not per prompt: any retraining
    # trades a few phrase checks both ways under greedy decoding. "All pass" is opt-in: a small
    # model tuned for minutes rarely says every required phrase (the full gate demo's good adapter passed 2 of 6, the base 0), so as a default it
    # failed every adapter, good or damaged, and told the user nothing.
    "golden_not_worse": True,
    "golden_all_pass": False,  # every golden prompt passes its must / must-not phrases
    "perplexity_not_worse": True,  # whole-set perplexity not above base beyond chance
    # An LLM judge's floors, used only when an evaluation asked one and it agrees with people
    # (adapters.shelf.judge_rules).
    "judge": dict(DEFAULT_JUDGE_RULES),
}
PASSED, FAILED, NOT_EVALUATED = "passed", "failed", "not evaluated"


class GateRulesError(ValueError):
    """gate.json cannot be used; the message says why and how to fix it."""


@dataclass
class GateStatus:
    """Whether an adapter passed its release gate, as the shelf, export and serving say it."""

    state: str  # PASSED, FAILED or NOT_EVALUATED
    reasons: list[str] = field(default_factory=list)  # why it failed / is not evaluated
    eval_id: str = ""
    date: str = ""

    @property
    def passed(self) -> bool:
        return self.state == PASSED

    def sentence(self, name: str) -> str:
        """One line: ``release gate of NAME: failed (evaluation X, date): reason; reason``."""
        where = f" (evaluation {self.eval_id}, {self.date})" if self.eval_id else ""
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"release gate of {name}: {self.state}{where}{why}"


def check_rules(rules) -> dict:
    """Rules with every key known and typed; defaults fill the missing keys.

    Raises:
        GateRulesError: unknown keys or wrong types, all named at once.
    """
    if not isinstance(rules, dict):
        raise GateRulesError("gate.json must hold a JSON object of rules")
    problems = [f"unknown rule {k!r}" for k in rules if k not in DEFAULT_RULES and k != "format"]
    if rules.get("format", FORMAT) != FORMAT:
        problems.append(f"format is {rules['format']!r}, expected {FORMAT!r}")
    merged = {**DEFAULT_RULES, **{k: v for k, v in rules.items() if k in DEFAULT_RULES}}
    metrics = merged["slices_not_worse"]
    if not isinstance(metrics, list) or any(m not in GATE_METRICS for m in metrics):
        problems.append(f"slices_not_worse must be a list of {', '.join(GATE_METRICS)}, "
                        f"got {metrics!r}")
    for key in ("golden_not_worse", "golden_all_pass", "perplexity_not_worse"):
        if not isinstance(merged[key], bool):
            problems.append(f"{key} must be true or false, got {merged[key]!r}")
    merged["judge"], judge_problems = check_judge_rules(merged["judge"])
    problems += judge_problems
    if problems:
        raise GateRulesError("gate.json: " + "; ".join(problems) + " (known rules: "
                             + ", ".join(DEFAULT_RULES) + ")")
    return merged


def read_rules(folder: Path) -> dict:
    """The adapter's rules: its gate.json, or the defaults when it has none.

    Raises:
        GateRulesError: gate.json is not valid JSON or holds bad rules, in one sentence.
    """
    path = Path(folder) / GATE_FILE
    if not path.exists():
        return dict(DEFAULT_RULES)
    try:
        rules = read_json(path)
    except BrokenAdapterError as err:
        raise GateRulesError(f"{err} in {Path(folder).name}; fix it or reset the rules with "
                             f"`python -m adapters gate {Path(folder).name} --reset`") from None
    return check_rules(rules)


def write_rules(folder: Path, rules: dict) -> dict:
    """Check and save ``rules`` as the adapter's gate.json (atomic); returns what was saved."""
    checked = check_rules(rules)
    write_json_atomic(Path(folder) / GATE_FILE, {"format": FORMAT, **checked})
    return checked


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` from the command line: booleans, or a comma list of metrics (``none``)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or key not in DEFAULT_RULES:
        raise GateRulesError(f"expected RULE=VALUE with RULE one of {', '.join(DEFAULT_RULES)}; "
                             f"got {text!r}")
    if isinstance(DEFAULT_RULES[key], bool):
        if value.lower() not in ("true", "false", "yes", "no", "1", "0"):
            raise GateRulesError(f"{key} must be true or false, got {value!r}")
        return key, value.lower() in ("true", "yes", "1")
    if value.lower() in ("", "none"):
        return key, []
    return key, [m.strip() for m in value.split(",") if m.strip()]


def rules_hash(rules: dict) -> str:
    """16 hex chars over the rules' content (key order does not count)."""
    text = json.dumps({k: rules[k] for k in DEFAULT_RULES}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def weights_hash(folder: Path, manifest: dict) -> str:
    """The adapter's content hash: the manifest's ``adapter_hash``, else the file's sha256."""
    recorded = str(manifest.get("adapter_hash") or "")
    if recorded:
        return recorded
    try:
        return cached_hash(Path(folder) / WEIGHTS)
    except OSError:
        return ""


def gate_status(folder: Path, manifest: dict) -> GateStatus:
    """What the recorded verdict says now (``not evaluated`` once anything changed since)."""
    try:
        rules = read_rules(folder)
    except GateRulesError as err:
        return GateStatus(NOT_EVALUATED, [str(err)])
    record = manifest.get("gate") if isinstance(manifest, dict) else None
    if not isinstance(record, dict) or record.get("state") not in (PASSED, FAILED):
        return GateStatus(NOT_EVALUATED, ["no evaluation has checked its release gate yet"])
    eval_id, date = str(record.get("eval_id", "")), str(record.get("date", ""))
    if record.get("adapter_hash") != weights_hash(folder, manifest):
        return GateStatus(NOT_EVALUATED, [f"its weights changed after evaluation {eval_id}"])
    if record.get("rules_hash") != rules_hash(rules):
        return GateStatus(NOT_EVALUATED, [f"its gate.json changed after evaluation {eval_id}"])
    reasons = [str(r) for r in record.get("reasons") or []]
    return GateStatus(record["state"], reasons, eval_id, date)


def entry_status(entry) -> GateStatus:
    """:func:`gate_status` of a shelf entry (a broken adapter is never a pass)."""
    if not entry.ok:
        return GateStatus(NOT_EVALUATED, [f"the adapter is broken: {entry.reason}"])
    return gate_status(entry.path, entry.manifest)


def warning_for(entry) -> str:
    """A warning sentence when ``entry`` has not passed its gate; "" when it has."""
    status = entry_status(entry)
    if status.passed:
        return ""
    return (f"adapter {entry.name!r} has not passed its release gate ({status.state}"
            + (f": {'; '.join(status.reasons)}" if status.reasons else "") + ")")


def shelf_warnings(shelf) -> list[str]:
    """One warning per whole adapter on ``shelf`` that has not passed its release gate."""
    return [w for w in (warning_for(e) for e in shelf.list() if e.ok) if w]


def record(shelf, name: str, verdict: dict, report: dict) -> dict:
    """Write ``verdict`` (from ``eval.gate``) into the manifest's ``gate``; returns the record.

    Args:
        shelf: the :class:`adapters.shelf.store.Shelf` the adapter is on.
        verdict: ``{"state", "reasons", "rules"}``.
        report: ``{"eval_id", "date", "report"}`` of the evaluation that produced it.
    """
    entry = shelf.get(name)
    gate = {"state": verdict["state"], "reasons": list(verdict.get("reasons", [])),
            "notes": list(verdict.get("notes", [])), "rules": verdict["rules"],
            "against": verdict.get("against", "base"),
            "rules_hash": rules_hash(verdict["rules"]),
            "adapter_hash": weights_hash(entry.path, entry.manifest), **report}
    # Every key is written every time, so merging into an older record leaves nothing stale.
    shelf.write_manifest_fields(name, {"gate": gate})
    return gate
