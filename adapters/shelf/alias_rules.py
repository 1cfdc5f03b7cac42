"""What makes an alias and its split acceptable, each problem in words a person can act on.

- the alias name: 1-64 letters, digits, ``.``, ``_`` or ``-``; not ``base`` / ``default``, not an
  adapter's name, not the base model of its versions;
- the split: 1 to :data:`MAX_VERSIONS` versions, each an intact adapter on the shelf, each
  weight a whole number from 0 to 100, the weights summing to 100;
- the gate: a version whose weight goes up must have passed its release gate, unless the
  change is forced with a reason;
- the automatic rollback, when asked for: a margin above 0 and at most 1 (0.1: ten points of
  error or thumbs-down rate), whole minimum counts of at least 1;
- the check before an answer is sent (``check``): ``on`` or ``off`` (the default).
- the grounding: ``off``, ``auto`` (each version's own trained-beside knowledge) or a knowledge
  base's name, ``NAME`` (its newest version) or ``NAME@vN`` (that version).

Every problem is collected and raised once (:class:`AliasError`); ``param`` names the first,
as the API's error shape wants (``name``, ``versions``, ``versions.<version>``, ``reason``).
"""

from __future__ import annotations

from adapters.shelf.gate_rules import entry_status
from core.paths import safe_name
from core.user_text import quote

RESERVED = ("base", "__base__", "default")
MAX_VERSIONS = 8
AUTO_ROLLBACK_DEFAULTS = {"min_requests": 50, "min_ratings": 10}
CHECK_SETTINGS = ("off", "on")
GROUNDING_OFF, GROUNDING_AUTO = "off", "auto"
DEFAULT_GROUNDING = GROUNDING_AUTO  # an alias that never said: each version's own knowledge


class AliasError(ValueError):
    """A refused alias change; ``param`` names the field at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def parse_split(items: list[str]) -> dict[str, int]:
    """``["v3=90", "v4=10"]`` from the command line as ``{"v3": 90, "v4": 10}``.

    Raises:
        AliasError: an item is not VERSION=WEIGHT, a weight is not a whole number, or a version
            is named twice (all at once).
    """
    split, problems = {}, []
    for item in items:
        version, sep, weight = str(item).partition("=")
        version, weight = version.strip(), weight.strip()
        if not sep or not version:
            problems.append(f"expected VERSION=WEIGHT (e.g. support-v4=10), got {quote(item)}")
        elif not weight.isdigit():
            problems.append(
                f"the weight of {quote(version)} must be a whole number from 0 to 100, got "
                f"{quote(weight)}"
            )
        elif version in split:
            problems.append(f"{quote(version)} is named twice")
        else:
            split[version] = int(weight)
    if problems:
        raise AliasError("; ".join(problems), "versions")
    return split


def check_name(name, shelf, clash: bool = True) -> str:
    """The alias name, or :class:`AliasError` saying why it cannot be one (``clash`` False:
    only its spelling is checked, not whether the base model or an adapter has it)."""
    try:
        safe_name(name, "alias name")
    except ValueError as err:
        raise AliasError(str(err), "name") from None
    if not clash:
        return name
    if name.lower() in RESERVED:
        raise AliasError(f"{name!r} names the base model; pick another alias name", "name")
    if shelf.path(name, must_exist=False).exists():
        raise AliasError(
            f"{name!r} is an adapter on the shelf; an alias needs a name of its own "
            "(clients would not know which one they get)",
            "name",
        )
    return name


def check_split(split, shelf, alias: str = "") -> dict[str, int]:
    """The split as ``{version: weight}`` in the given order, checked against the shelf (and
    ``alias`` against the base model its versions name).

    Raises:
        AliasError: every problem at once.
    """
    if not isinstance(split, dict) or not split:
        raise AliasError(
            "versions must map at least one adapter on the shelf to its weight, "
            'e.g. {"support-v3": 90, "support-v4": 10}',
            "versions",
        )
    problems: list[tuple[str, str]] = []
    if len(split) > MAX_VERSIONS:
        problems.append(
            ("versions", f"at most {MAX_VERSIONS} versions per alias, got {len(split)}")
        )
    for version, weight in split.items():
        where = f"versions.{str(version)[:64]}"
        if type(weight) is not int or not 0 <= weight <= 100:
            problems.append(
                (
                    where,
                    f"the weight of {quote(version)} must be a whole number from 0 to 100, "
                    f"got {quote(weight)}",
                )
            )
        entry, problem = _version_entry(version, shelf)
        if problem:
            problems.append((where, problem))
        elif alias and entry.base_model == alias:
            problems.append(
                ("name", f"{alias!r} names the base model of {version!r}; pick another alias name")
            )
    weights = [w for w in split.values() if type(w) is int]
    if len(weights) == len(split) and sum(weights) != 100:
        problems.append(("versions", f"the weights must sum to 100, they sum to {sum(weights)}"))
    if problems:
        raise AliasError("; ".join(p for _, p in problems), problems[0][0])
    return dict(split)


def check_auto_rollback(policy) -> dict | None:
    """An alias's automatic rollback as stored (defaults filled in), or None for none.

    ``{"margin": 0.1, "min_requests": 50, "min_ratings": 10}``: a canary is rolled back when its
    error rate, after ``min_requests`` answers, or its thumbs-down rate, after ``min_ratings``
    ratings, exceeds the stable version's by more than ``margin``.

    Raises:
        AliasError: every problem at once; ``param`` names the first (``auto_rollback.margin``).
    """
    if policy is None:
        return None
    if not isinstance(policy, dict):
        raise AliasError(
            'auto_rollback must be an object like {"margin": 0.1, "min_requests": 50} '
            "or null (off)",
            "auto_rollback",
        )
    policy = {**AUTO_ROLLBACK_DEFAULTS, **policy}
    problems = [
        (
            f"auto_rollback.{str(key)[:32]}",
            f"unknown auto-rollback setting {quote(key)}; known: "
            f"margin, {', '.join(AUTO_ROLLBACK_DEFAULTS)}",
        )
        for key in policy
        if key != "margin" and key not in AUTO_ROLLBACK_DEFAULTS
    ]
    margin = policy.get("margin")
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 < margin <= 1:
        problems.append(
            (
                "auto_rollback.margin",
                "the auto-rollback margin must be a number above 0 and at most 1 "
                f"(0.1: ten points of error or thumbs-down rate), got {quote(margin)}",
            )
        )
    for key in AUTO_ROLLBACK_DEFAULTS:
        if type(policy[key]) is not int or policy[key] < 1:
            problems.append(
                (
                    f"auto_rollback.{key}",
                    f"{key.replace('_', ' ')} must be a whole number of at least 1, "
                    f"got {quote(policy[key])}",
                )
            )
    if problems:
        raise AliasError("; ".join(p for _, p in problems), problems[0][0])
    return {"margin": float(margin), **{key: policy[key] for key in AUTO_ROLLBACK_DEFAULTS}}


def check_setting(value) -> str:
    """An alias's ``check`` setting as stored: ``on`` or ``off`` (None: off).

    Raises:
        AliasError: anything else, naming what is accepted.
    """
    if value is None:
        return "off"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in CHECK_SETTINGS:
        return value.strip().lower()
    raise AliasError(
        f"check must be 'on' or 'off' (the answer checked before it is sent), got {quote(value)}",
        "check",
    )


def check_grounding(value) -> str:
    """An alias's grounding as stored: ``off``, ``auto``, ``NAME`` or ``NAME@vN``.

    Only the spelling is checked here; whether that knowledge version is on the shelf is
    checked by the server (a request says so in a sentence when it is gone).

    Raises:
        AliasError: not one of those forms (``param`` ``grounding``).
    """
    text = value.strip() if isinstance(value, str) else ""
    if text.lower() in (GROUNDING_OFF, GROUNDING_AUTO):
        return text.lower()
    name, at, version = text.partition("@")
    try:
        safe_name(name, "knowledge name")
    except ValueError:
        name = ""
    if not name or (at and not (version[:1] == "v" and version[1:].isdigit())):
        raise AliasError(
            "grounding must be 'off', 'auto' (each version's own knowledge), a "
            f"knowledge base's name, or NAME@vN (e.g. faq@v2), got {quote(value)}",
            "grounding",
        )
    return text


def split_grounding(value: str) -> tuple[str, str] | None:
    """``(name, version)`` of a ``NAME`` / ``NAME@vN`` grounding (``latest`` for a bare name);
    None for ``off`` and ``auto``."""
    if value in (GROUNDING_OFF, GROUNDING_AUTO):
        return None
    name, _, version = value.partition("@")
    return name, version or "latest"


def gate_problems(
    split: dict[str, int],
    old: dict[str, int],
    shelf,
    force: bool,
    reason: str,
    grounding: str | None = None,
    regrounded: bool = False,
    check: str = "off",
) -> list[str]:
    """The versions gaining traffic without a passed release gate (allowed only when forced).

    A version passes as served: its gate passed, or the alias checks each answer before it is
    sent (``check`` on) and its gate passed on the checked answers.

    A gate that passed on grounded answers passed what an alias grounded that way serves: with
    ``grounding`` (the alias's, after the change) every version gaining traffic, or every
    version with traffic when the grounding itself changes (``regrounded``), must be served as
    its gate checked it (:func:`grounding_mismatch`).

    Returns:
        Those versions (empty when all passed), which a forced change lets through.

    Raises:
        AliasError: such versions and no ``force``; or ``force`` without a reason.
    """
    if force and not str(reason or "").strip():
        raise AliasError(
            "an override (--force) needs a reason saying why (--reason TEXT); the audit log "
            "keeps it",
            "reason",
        )
    failing = []
    for version, weight in split.items():
        gaining = weight > old.get(version, 0)
        if not gaining and not (regrounded and weight):
            continue
        entry = shelf.get(version)
        status = entry_status(entry)
        relied = status.passed or status.checked == "passed"  # took traffic on its gate
        if not status.passes(check) and (gaining or relied):
            failing.append((version, status.sentence(version)))
        elif status.passes(check) and grounding is not None:
            other = grounding_mismatch(status.grounding, grounding, entry.manifest)
            if other:
                failing.append((version, f"{version}: {other}"))
    if failing and not force:
        raise AliasError(
            "; ".join(s for _, s in failing)
            + ". Only a version whose release gate passed, served as the gate checked it, may "
            "gain traffic; evaluate it (python -m eval), or override with --force --reason TEXT "
            '(API: "force": true, "reason")',
            f"versions.{failing[0][0]}",
        )
    return [v for v, _ in failing]


def served_grounding(grounding: str, manifest: dict) -> str:
    """What an alias with ``grounding`` grounds a version's answers in: ``off``, or the
    knowledge ``NAME vN`` (``NAME latest`` for a bare name; ``auto``: the version's own
    trained-beside knowledge, ``off`` when it names none)."""
    if grounding == GROUNDING_OFF:
        return "off"
    if grounding == GROUNDING_AUTO:
        own = (manifest or {}).get("knowledge") or {}
        if not isinstance(own, dict) or not own.get("name"):
            return "off"
        return f"{own['name']} {own.get('version') or 'latest'}"
    name, version = split_grounding(grounding)
    return f"{name} {version}"


def grounding_mismatch(gated: str, grounding: str, manifest: dict) -> str:
    """A sentence when a gate that passed on answers grounded in ``gated`` would be served
    otherwise by an alias with ``grounding``; "" when it serves what was checked (or the gate
    checked plain answers, which says nothing about grounding)."""
    if gated == "off":
        return ""
    served = served_grounding(grounding, manifest)
    if served == gated or (served.endswith(" latest") and served.split()[0] == gated.split()[0]):
        return ""
    how = "ungrounded" if served == "off" else f"grounded in {served}"
    pinned = gated.replace(" ", "@")
    fits = f"{pinned} (pinned) or {gated.split()[0]} (its newest version)"
    if served_grounding(GROUNDING_AUTO, manifest) == gated:
        fits = f"auto, {fits}"
    name, version = served.partition(" ")[::2]
    asked = name if version == "latest" else f"{name}@{version}"
    how_to = "--grounding off" if served == "off" else f"--knowledge {asked}"
    return (
        f"its release gate passed on answers grounded in {gated}, and this alias would serve "
        f"it {how}; set grounding {fits}, or evaluate it as served (python -m eval {how_to})"
    )


def _version_entry(version, shelf):
    """(shelf entry, "") or (None, why ``version`` cannot take traffic)."""
    try:
        safe_name(version, "adapter name")
        entry = shelf.get(version)
    except ValueError:
        return (
            None,
            f"{quote(version)} is not an adapter on the shelf (`python -m adapters list` shows "
            "them)",
        )
    return (entry, "") if entry.ok else (None, f"adapter {version!r} is broken: {entry.reason}")
