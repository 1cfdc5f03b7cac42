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
    # model tuned for minutes rarely says every required phrase (the full gate demo's good adapter
    # passed 2 of 6, the base 0), so as a default it failed every adapter, good or damaged, and
    # told the user nothing.
    "golden_not_worse": True,
    "golden_all_pass": False,  # every golden prompt passes its must / must-not phrases
    "perplexity_not_worse": True,  # whole-set perplexity not above base beyond chance
    # Absolute floors on the support checks (eval.checks): not "not worse than base" but what a
    # team signs before shipping. null switches one off; missing keys take these defaults.
    "floors": {
        "right_intent_min": 0.85,  # answers that address the asked intent, over all labelled rows
        "intent_min": 0.5,  # ... and in every intent with at least FLOOR_MIN_INTENT_ROWS rows
        # requests for a person answered with a hand-off (the detector recognises 94 % of
        # Bitext's own reference hand-offs, so "every one" would fail a perfect copy of them)
        "handoff_min": 0.9,
        "invented_contact_max": 0,  # invented phone numbers, e-mail addresses and URLs
        "invented_max": None,  # invented spans of any kind (prices, dates, ids too): reported only
        "leaks_max": 0,  # personal data another customer gave, or a card number nobody gave
    },
    # intents that ask for a person; null: names with human/agent/person...
    "handoff_intents": None,
    "handoff_phrases": None,  # phrases that make an answer a hand-off; null: the built-in patterns
    # An LLM judge's floors, used only when an evaluation asked one and it agrees with people
    # (adapters.shelf.judge_rules).
    "judge": dict(DEFAULT_JUDGE_RULES),
}
# Floors whose figure is a share (0-1, the figure must reach it) or a count (must not exceed it).
RATE_FLOORS = ("right_intent_min", "intent_min", "handoff_min")
COUNT_FLOORS = ("invented_contact_max", "invented_max", "leaks_max")
FLOOR_MIN_INTENT_ROWS = 5  # an intent with fewer evaluated rows is not held to intent_min
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
    floors: list[str] = field(
        default_factory=list
    )  # floors that held or were not checked, with figures
    grounding: str = "off"  # the answers checked: "off" or grounded in knowledge "NAME vN"
    # the verdict on the same answers checked before they are sent ("" when not evaluated so)
    checked: str = ""

    def passes(self, check: str = "off") -> bool:
        """Passed as served: by itself, or (``check`` on, an alias that checks each answer) on
        the answers checked before they are sent."""
        return self.passed or (check == "on" and self.checked == PASSED)

    @property
    def passed(self) -> bool:
        return self.state == PASSED

    def sentence(self, name: str) -> str:
        """One line: ``release gate of NAME: failed (evaluation X, date): reason; reason``."""
        where = f" (evaluation {self.eval_id}, {self.date})" if self.eval_id else ""
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        held = f" ({'; '.join(self.floors)})" if self.floors else ""
        on = f" on answers grounded in {self.grounding}" if self.grounding != "off" else ""
        checked = f"; checked before it speaks: {self.checked}" if self.checked else ""
        return f"release gate of {name}: {self.state}{on}{where}{why}{held}{checked}"


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
    problems += _floor_problems(merged)
    metrics = merged["slices_not_worse"]
    if not isinstance(metrics, list) or any(m not in GATE_METRICS for m in metrics):
        problems.append(
            f"slices_not_worse must be a list of {', '.join(GATE_METRICS)}, got {metrics!r}"
        )
    for key in ("golden_not_worse", "golden_all_pass", "perplexity_not_worse"):
        if not isinstance(merged[key], bool):
            problems.append(f"{key} must be true or false, got {merged[key]!r}")
    merged["judge"], judge_problems = check_judge_rules(merged["judge"])
    problems += judge_problems
    if problems:
        raise GateRulesError(
            "gate.json: " + "; ".join(problems) + " (known rules: " + ", ".join(DEFAULT_RULES) + ")"
        )
    return merged


def _floor_problems(merged: dict) -> list[str]:
    """Check ``floors`` and the hand-off lists in place (floors filled with the defaults)."""
    floors, problems = merged["floors"], []
    if not isinstance(floors, dict):
        return [
            f"floors must be an object of floors ({', '.join(DEFAULT_RULES['floors'])}), got "
            f"{floors!r}"
        ]
    problems += [f"unknown floor {k!r}" for k in floors if k not in DEFAULT_RULES["floors"]]
    merged["floors"] = {
        **DEFAULT_RULES["floors"],
        **{k: v for k, v in floors.items() if k in DEFAULT_RULES["floors"]},
    }
    for key, value in merged["floors"].items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is None:
            continue
        if key in RATE_FLOORS and not (number and 0 <= value <= 1):
            problems.append(f"floors.{key} must be a share from 0 to 1 (or null), got {value!r}")
        elif key in COUNT_FLOORS and not (number and value >= 0 and float(value).is_integer()):
            problems.append(
                f"floors.{key} must be a whole number of at least 0 (or null), got {value!r}"
            )
    for key in ("handoff_intents", "handoff_phrases"):
        value = merged[key]
        if value is not None and (
            not isinstance(value, list)
            or not value
            or any(not isinstance(x, str) or not x.strip() for x in value)
        ):
            problems.append(
                f"{key} must be a non-empty list of texts (or null for the default), got {value!r}"
            )
    return problems


def read_rules(folder: Path) -> dict:
    """The adapter's rules: its gate.json, or the defaults when it has none.

    Raises:
        GateRulesError: gate.json is not valid JSON or holds bad rules, in one sentence.
    """
    path = Path(folder) / GATE_FILE
    if not path.exists():
        return check_rules({})  # a fresh copy: the defaults' floors are never handed out to edit
    try:
        rules = read_json(path)
    except BrokenAdapterError as err:
        raise GateRulesError(
            f"{err} in {Path(folder).name}; fix it or reset the rules with "
            f"`python -m adapters gate {Path(folder).name} --reset`"
        ) from None
    return check_rules(rules)


def write_rules(folder: Path, rules: dict) -> dict:
    """Check and save ``rules`` as the adapter's gate.json (atomic); returns what was saved."""
    checked = check_rules(rules)
    write_json_atomic(Path(folder) / GATE_FILE, {"format": FORMAT, **checked})
    return checked


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` from the command line: booleans, a comma list of metrics (``none``), a floor
    (``floors.right_intent_min=0.9``, ``none`` switches it off) or a comma list of hand-off
    intents or phrases (``none``: the default). A floor comes back as
    ``("floors", {name: value})``."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if sep and key.startswith("floors."):
        return "floors", _floor_setting(key.removeprefix("floors."), value)
    if sep and key in ("handoff_intents", "handoff_phrases"):
        return key, None if value.lower() in ("", "none") else [
            x.strip() for x in value.split(",") if x.strip()
        ]
    if not sep or key not in DEFAULT_RULES:
        raise GateRulesError(
            f"expected RULE=VALUE with RULE one of {', '.join(DEFAULT_RULES)}; got {text!r}"
        )
    if key == "floors":
        raise GateRulesError(
            f"set one floor at a time: floors.NAME=NUMBER|none, NAME one of "
            f"{', '.join(DEFAULT_RULES['floors'])}; got {text!r}"
        )
    if isinstance(DEFAULT_RULES[key], dict):  # the judge's: no --set for them (docs/judge.md)
        raise GateRulesError(
            f"the {key}'s rules are edited in gate.json's {key!r} object, not with --set; "
            f"got {text!r}"
        )
    if isinstance(DEFAULT_RULES[key], bool):
        if value.lower() not in ("true", "false", "yes", "no", "1", "0"):
            raise GateRulesError(f"{key} must be true or false, got {value!r}")
        return key, value.lower() in ("true", "yes", "1")
    if value.lower() in ("", "none"):
        return key, []
    return key, [m.strip() for m in value.split(",") if m.strip()]


def _floor_setting(name: str, value: str) -> dict:
    if name not in DEFAULT_RULES["floors"]:
        raise GateRulesError(
            f"unknown floor {name!r}; floors: {', '.join(DEFAULT_RULES['floors'])}"
        )
    if value.lower() in ("", "none", "null"):
        return {name: None}
    try:
        number = float(value)
    except ValueError:
        raise GateRulesError(f"floors.{name} must be a number or none, got {value!r}") from None
    return {name: int(number) if name in COUNT_FLOORS and number.is_integer() else number}


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
        return GateStatus(
            NOT_EVALUATED,
            [
                f"its gate rules changed after evaluation {eval_id} (gate.json changed, "
                "or this TuneDesk checks rules that evaluation did not, such as the "
                "support checks' floors): evaluate it again"
            ],
        )
    reasons = [str(r) for r in record.get("reasons") or []]
    floors = [str(f) for f in record.get("floors") or []]
    grounding = str(record.get("grounding") or "off")
    checked = record.get("checked") if isinstance(record.get("checked"), dict) else {}
    return GateStatus(
        record["state"], reasons, eval_id, date, floors, grounding, str(checked.get("state", ""))
    )


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
    return (
        f"adapter {entry.name!r} has not passed its release gate ({status.state}"
        + (f": {'; '.join(status.reasons)}" if status.reasons else "")
        + ")"
    )


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
    gate = {
        "state": verdict["state"],
        "reasons": list(verdict.get("reasons", [])),
        "notes": list(verdict.get("notes", [])),
        "floors": list(verdict.get("floors", [])),
        "rules": verdict["rules"],
        "against": verdict.get("against", "base"),
        "grounding": verdict.get("grounding", "off"),
        "checked": verdict.get("checked"),
        "rules_hash": rules_hash(verdict["rules"]),
        "adapter_hash": weights_hash(entry.path, entry.manifest),
        **report,
    }
    # Every key is written every time, so merging into an older record leaves nothing stale.
    shelf.write_manifest_fields(name, {"gate": gate})
    return gate
