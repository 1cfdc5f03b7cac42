"""The Adapters tab's aliases: the split, promotion and rollback as sentences, and each
version's live figures as a table and a plot. No gradio here.

Changes go through :mod:`adapters.alias_actions`, as ``python -m adapters alias`` does, so the
release gate refuses a promotion here in the CLI's words. The figures are those the API counts
(:class:`serve.version_stats.VersionStats`, shared with the app's ``/v1`` server).
"""

from __future__ import annotations

import time

import pandas as pd

from adapters import alias_actions as actions
from adapters.shelf.alias_rules import AliasError
from adapters.shelf.aliases import AliasBook
from feedback.store import FeedbackStore
from serve.version_stats import VersionStats, thumbs

ACTIONS = ("set", "promote", "rollback", "delete")
COLUMNS = ["version", "weight %", "requests", "errors", "first token p50 / p95 s", "answer p50 / p95 s",
           "thumbs-down rate (up / down)"]
PLOT_BUCKET_S = 15  # a canary shows a line within half a minute, not after two minutes
METRICS = {"answer p95 (s)": "answer_p95_s", "first token p95 (s)": "first_token_p95_s",
           "requests": "requests", "error rate": "error_rate"}


def names() -> list[str]:
    """Every alias, by name."""
    return list(AliasBook().all())


def details(name: str | None) -> str:
    """One alias as markdown: its split, each version's gate, its last changes."""
    if not name:
        return "No alias chosen: type a name and a split (`support-v3=90 support-v4=10`), then **Set split**."
    try:
        lines = actions.details(name)
    except (AliasError, OSError) as err:
        return f"⚠️ {err}"
    return "```\n" + "\n".join(lines) + "\n```"


def change(action: str, name: str, split: str, version: str, force: bool, reason: str, by: str) -> str:
    """Run one change as typed in the tab; the sentence to show (a refusal starts with ⚠️)."""
    name, gate = (name or "").strip(), {"force": bool(force), "reason": reason or ""}
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
        return f"⚠️ {err}"
    raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")


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
        rows.append([version, weight, got["requests"], got["errors"],
                     f"{_s(got['first_token_p50_s'])} / {_s(got['first_token_p95_s'])}",
                     f"{_s(got['answer_p50_s'])} / {_s(got['answer_p95_s'])}",
                     f"{_s(rated['thumbs_down_rate'])} ({rated['thumbs_up']} / {rated['thumbs_down']})"])
    return rows


def plot_frame(stats: VersionStats, name: str | None, metric: str, bucket_s: float = PLOT_BUCKET_S) -> pd.DataFrame:
    """``time, version, value`` per ``bucket_s`` for the plot: ``metric`` (a :data:`METRICS` label)."""
    key = METRICS.get(metric, "answer_p95_s")
    try:
        split = AliasBook().get(name) if name else {}
    except (AliasError, OSError):
        split = {}
    rows = [{"time": pd.Timestamp(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b["t"]))),
             "version": version, "value": b[key]}
            for version in split for b in stats.summary(version, bucket_s)["series"] if b[key] is not None]
    return pd.DataFrame(rows, columns=["time", "version", "value"])


def _weights(engines, version: str) -> str:
    """The weights hash ratings of ``version`` were given to ("" when unknown)."""
    if engines is None:
        return ""
    try:
        return engines.weights_hash(version)
    except ValueError:
        return ""


def _s(value) -> str:
    return "—" if value is None else f"{value:.2f}"
