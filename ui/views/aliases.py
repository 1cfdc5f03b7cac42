"""The Adapters tab's aliases: the split, promotion, rollback and the automatic rollback as
sentences, and each version's live figures as a table and a plot. No gradio here.

Changes go through :mod:`adapters.alias_actions`, as ``python -m adapters alias`` does, so the
release gate refuses a promotion here in the CLI's words. The figures are those the API counts
(:class:`serve.version_stats.VersionStats`, shared with the app's ``/v1`` server).
"""

from __future__ import annotations

import os
import time

import pandas as pd

from adapters import alias_actions as actions
from adapters.shelf.alias_rules import (
    AUTO_ROLLBACK_DEFAULTS,
    GROUNDING_AUTO,
    GROUNDING_OFF,
    AliasError,
    check_grounding,
    check_setting,
    split_grounding,
)
from adapters.shelf.aliases import AliasBook, grounding_of
from feedback.store import FeedbackStore
from knowledge.store import KnowledgeShelf
from serve.version_stats import VersionStats, thumbs, thumbs_series
from ui.views.wording import as_markdown, for_ui

ACTIONS = ("set", "promote", "rollback", "delete")
COLUMNS = [
    "version",
    "weight %",
    "requests",
    "errors",
    "first token p50 / p95 s",
    "answer p50 / p95 s",
    "thumbs-down rate (up / down)",
]
PLOT_BUCKET_S = 15.0  # a canary shows a line within half a minute, not after two minutes
PLOT_BUCKET_ENV = (
    "TUNEDESK_ALIAS_PLOT_BUCKET_S"  # seconds per point of the plot (tests draw per second)
)
METRICS = {
    "answer p95 (s)": "answer_p95_s",
    "answer p50 (s)": "answer_p50_s",
    "first token p95 (s)": "first_token_p95_s",
    "first token p50 (s)": "first_token_p50_s",
    "requests": "requests",
    "errors": "errors",
    "error rate": "error_rate",
    "thumbs-down rate": "thumbs_down_rate",
}
# a blank Alias box: the aliases' sentence was "invalid alias name '': use 1-64 letters, ..."
NAME_FIRST = "Type an alias name first, or pick one from Alias."


def plot_bucket_s() -> float:
    """Seconds per point of the plot: ``TUNEDESK_ALIAS_PLOT_BUCKET_S``, else 15.

    Raises:
        ValueError: the variable is not a number of seconds from 1 to 3600.
    """
    text = os.environ.get(PLOT_BUCKET_ENV, "").strip()
    if not text:
        return PLOT_BUCKET_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 1 <= seconds <= 3600:  # the plot's times are whole seconds
        raise ValueError(
            f"{PLOT_BUCKET_ENV} must be a number of seconds from 1 to 3600, got {text[:40]!r}"
        )
    return seconds


def names() -> list[str]:
    """Every alias, by name."""
    return list(AliasBook().all())


def details(name: str | None) -> str:
    """One alias as markdown: its split, each version's gate, its last changes."""
    if not name:
        return (
            "No alias chosen: type a name and a split (`support-v3=90 support-v4=10`), then "
            "**Set split**."
        )
    try:
        lines = actions.details(name)
    except (AliasError, OSError) as err:
        return f"⚠️ {as_markdown(for_ui(str(err)))}"
    return "```\n" + "\n".join(lines) + "\n```"


def change(
    action: str, name: str, split: str, version: str, force: bool, reason: str, by: str
) -> str:
    """Run one change as typed in the tab; the sentence to show (a refusal starts with ⚠️)."""
    name, gate = (name or "").strip(), {"force": bool(force), "reason": reason or ""}
    if not name:
        return NAME_FIRST
    try:
        if action == "set":
            return actions.set_split(name, (split or "").split(), by, **gate)
        if action == "promote":
            return actions.promote(name, (version or "").strip(), by, **gate)
        if action == "rollback":
            return actions.rollback(name, by, **gate)
        if action == "delete":
            return actions.delete(name, by)
    except (ValueError, OSError) as err:  # AliasError and the shelf's own sentences
        return f"⚠️ {as_markdown(for_ui(str(err)))}"
    raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")


def set_policy(name: str, margin, min_requests, min_ratings, by: str) -> str:
    """Turn alias ``name``'s automatic rollback on (a margin above 0) or off (0 or empty),
    keeping its split; the sentence to show (a refusal starts with ⚠️)."""
    if not (name or "").strip():
        return NAME_FIRST
    policy = None
    if margin:
        policy = {
            "margin": margin,
            "min_requests": _whole(min_requests, "min_requests"),
            "min_ratings": _whole(min_ratings, "min_ratings"),
        }
    try:
        return actions.set_split((name or "").strip(), None, by, auto_rollback=policy)
    except (ValueError, OSError) as err:
        return f"⚠️ {as_markdown(for_ui(str(err)))}"


def grounding_choices() -> list[str]:
    """The grounding dropdown's choices: auto, off, each knowledge base (newest) and version."""
    shelf = KnowledgeShelf()
    named = []
    for base in shelf.names():
        named += [base, *(f"{base}@{v.version}" for v in shelf.versions(base))]
    return [GROUNDING_AUTO, GROUNDING_OFF, *named]


def grounding_value(name: str | None) -> str:
    """Alias ``name``'s grounding (``auto`` when it has none or is not there)."""
    try:
        return grounding_of(AliasBook().row(name)) if name else GROUNDING_AUTO
    except (AliasError, OSError):
        return GROUNDING_AUTO


def set_grounding(name: str, grounding: str, by: str, force: bool = False, reason: str = "") -> str:
    """Ground alias ``name``'s answers as chosen (``auto``, ``off``, ``NAME[@vN]``), keeping its
    split; a knowledge version that is not on the shelf is refused, and so is serving a version
    otherwise than its gate checked it, unless forced with a reason. The sentence to show."""
    if not (name or "").strip():
        return NAME_FIRST
    try:
        named = split_grounding(check_grounding(grounding))
        if named is not None:
            KnowledgeShelf().get(*named)
        return actions.set_split(
            (name or "").strip(),
            None,
            by,
            force=bool(force),
            reason=reason or "",
            grounding=grounding,
        )
    except (ValueError, OSError) as err:
        return f"⚠️ {as_markdown(for_ui(str(err)))}"


def check_value(name: str | None) -> str:
    """Alias ``name``'s check before sending (``off`` when it has none or is not there)."""
    try:
        return check_setting(AliasBook().row(name).get("check")) if name else "off"
    except (AliasError, OSError):
        return "off"


def set_check(name: str, chosen: str, by: str) -> str:
    """Turn alias ``name``'s check before sending ``on`` or ``off``, keeping its split; the
    sentence to show."""
    if not (name or "").strip():
        return NAME_FIRST
    try:
        return actions.set_split((name or "").strip(), None, by, check=chosen)
    except (ValueError, OSError) as err:
        return f"⚠️ {as_markdown(for_ui(str(err)))}"


def policy_fields(name: str | None) -> tuple[float, int, int]:
    """(margin, minimum requests, minimum ratings) of alias ``name``'s automatic rollback, for the
    form (margin 0: off)."""
    try:
        policy = AliasBook().row(name).get("auto_rollback") if name else None
    except (AliasError, OSError):
        policy = None
    policy = policy or {"margin": 0.0, **AUTO_ROLLBACK_DEFAULTS}
    return policy["margin"], policy["min_requests"], policy["min_ratings"]


def figures(stats: VersionStats, name: str | None, engines=None) -> list[list]:
    """One row per version of alias ``name``: weight, counts, timings, thumbs-down rate."""
    try:
        split = AliasBook().get(name) if name else {}
    except (AliasError, OSError):
        return []
    ratings = FeedbackStore().ratings() if split else []
    rows = []
    for version, weight in split.items():
        got = stats.summary(version)
        rated = thumbs(ratings, version, _weights(engines, version))
        rows.append(
            [
                version,
                weight,
                got["requests"],
                got["errors"],
                f"{_s(got['first_token_p50_s'])} / {_s(got['first_token_p95_s'])}",
                f"{_s(got['answer_p50_s'])} / {_s(got['answer_p95_s'])}",
                f"{_s(rated['thumbs_down_rate'])} ({rated['thumbs_up']} / {rated['thumbs_down']})",
            ]
        )
    return rows


def plot_frame(
    stats: VersionStats, name: str | None, metric: str, bucket_s: float | None = None, engines=None
) -> pd.DataFrame:
    """``time, version, value`` per ``bucket_s`` (default :func:`plot_bucket_s`) over the stats'
    window for the plot: ``metric`` (a :data:`METRICS` label; the thumbs-down rate from the
    ratings of each version's weights)."""
    key, bucket_s = METRICS.get(metric, "answer_p95_s"), bucket_s or plot_bucket_s()
    try:
        split = AliasBook().get(name) if name else {}
    except (AliasError, OSError):
        split = {}
    if key == "thumbs_down_rate":
        ratings, start = FeedbackStore().ratings() if split else [], stats.clock() - stats.window_s
        series = {
            v: thumbs_series(ratings, v, _weights(engines, v), start, bucket_s) for v in split
        }
    else:
        series = {v: stats.summary(v, bucket_s)["series"] for v in split}
    rows = [
        {
            "time": pd.Timestamp(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b["t"]))),
            "version": version,
            "value": b[key],
        }
        for version, points in series.items()
        for b in points
        if b[key] is not None
    ]
    return pd.DataFrame(rows, columns=["time", "version", "value"])


def _weights(engines, version: str) -> str:
    """The weights hash ratings of ``version`` were given to ("" when unknown)."""
    if engines is None:
        return ""
    try:
        return engines.weights_hash(version)
    except ValueError:
        return ""


def _whole(value, key: str) -> int:
    """A count typed in a number box (empty: the default); a fraction stays, for
    the rules to refuse."""
    if value in (None, ""):
        return AUTO_ROLLBACK_DEFAULTS[key]
    return int(value) if float(value).is_integer() else value


def _s(value) -> str:
    return "—" if value is None else f"{value:.2f}"
