"""What ``python -m adapters alias`` and the Adapters tab do to aliases, with
the sentence each says.

Both front ends call these, so a promotion the gate refuses is refused in the same words in
the browser and on the command line (the API answers the same :class:`AliasError` as a 400
naming its field). Each change returns the sentence to show; the audit row is in the home.
"""

from __future__ import annotations

import getpass

from adapters.shelf.alias_rules import parse_split
from adapters.shelf.aliases import KEEP, AliasBook, grounding_of
from adapters.shelf.gate_rules import entry_status


def who(where: str) -> str:
    """``"<login> (<where>)"`` for the audit log; ``"unknown (<where>)"`` without a login."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no USER and no passwd entry (a bare container)
        login = "unknown"
    return f"{login} ({where})"


def split_text(split: dict[str, int] | None) -> str:
    """``support-v3 90% · support-v4 10%``; ``(none)`` for a missing split."""
    if not split:
        return "(none)"
    return " · ".join(f"{v} {w}%" for v, w in split.items())


def policy_text(policy: dict | None) -> str:
    """An alias's automatic rollback in words (``off`` when it has none)."""
    if not policy:
        return "off"
    return (
        f"when a canary's error rate (after {policy['min_requests']} requests) or thumbs-down "
        f"rate (after {policy['min_ratings']} ratings) exceeds the stable version's by more than "
        f"{policy['margin']:g}"
    )


def grounding_text(value: str | None) -> str:
    """An alias's grounding in words."""
    if value == "off":
        return "off (answers from the weights alone)"
    if value in (None, "", "auto"):
        return "auto (each version's own trained-beside knowledge)"
    return f"knowledge {value}"


def change_sentence(row: dict) -> str:
    """What one change did, from its audit row."""
    name = row["alias"]
    if not row.get("changed", True):
        return f"{name} already has that split ({split_text(row['to'])}); nothing changed."
    if row["to"] is None:
        return (
            f"Deleted alias {name} (was {split_text(row['from'])}); `alias rollback {name}` "
            "restores it."
        )
    said = f"{name}: {split_text(row['from'])} → {split_text(row['to'])}."
    if row["from"] == row["to"] and row["action"] != "rollback":
        said = f"{name}: {split_text(row['to'])} (split unchanged)."
    if row.get("auto_rollback"):
        said += f" Automatic rollback: {policy_text(row['auto_rollback']['to'])}."
    if row.get("check"):
        said += f" Answers checked before they are sent: {row['check']['to']}."
    if row.get("grounding") and row["to"] is not None:
        said += f" Grounding: {grounding_text(row['grounding']['to'])}."
    if row["action"] == "auto-rollback":
        said += f" Rolled back automatically: {row.get('reason')}."
    if row.get("forced"):
        said += (
            f" Override for {', '.join(row['forced'])} (release gate not passed): "
            f"{row['override']!r}."
        )
    return said


def set_split(
    name: str,
    split,
    by: str,
    force: bool = False,
    reason: str = "",
    book: AliasBook | None = None,
    auto_rollback=KEEP,
    check=KEEP,
    grounding=KEEP,
) -> str:
    """Give ``name`` a split: a dict, or ``["v3=90", "v4=10"]`` as typed (empty or None: keep
    the split, change only ``auto_rollback``, ``check`` or ``grounding``; None turns the
    automatic rollback off; ``check``: ``on`` or ``off``; leaving any out keeps it)."""
    if isinstance(split, list | tuple):
        split = parse_split(list(split)) if split else None
    return change_sentence(
        (book or AliasBook()).set(
            name,
            split,
            by=by,
            force=force,
            reason=reason,
            auto_rollback=auto_rollback,
            check=check,
            grounding=grounding,
        )
    )


def promote(
    name: str,
    version: str,
    by: str,
    force: bool = False,
    reason: str = "",
    book: AliasBook | None = None,
) -> str:
    """All new conversations to ``version``; the others keep theirs to the end."""
    return change_sentence(
        (book or AliasBook()).promote(name, version, by=by, force=force, reason=reason)
    )


def rollback(
    name: str, by: str, force: bool = False, reason: str = "", book: AliasBook | None = None
) -> str:
    """Back to the split before the last change."""
    return change_sentence((book or AliasBook()).rollback(name, by=by, force=force, reason=reason))


def delete(name: str, by: str, book: AliasBook | None = None) -> str:
    """Remove an alias (a rollback brings it back)."""
    return change_sentence((book or AliasBook()).delete(name, by=by))


def details(name: str, book: AliasBook | None = None, last: int = 5) -> list[str]:
    """Lines about one alias: its split with each version's gate, then its last changes."""
    book = book or AliasBook()
    row = book.row(name)
    split = row["versions"]
    lines = [
        f"{name}: {split_text(split)}",
        f"  automatic rollback: {policy_text(row.get('auto_rollback'))}",
        f"  grounding: {grounding_text(grounding_of(row))}",
    ]
    lines.append(f"  answers checked before they are sent: {row.get('check', 'off')}")
    for version, weight in split.items():
        try:
            gate = entry_status(book.shelf.get(version)).state
        except ValueError as err:  # deleted since: said, not raised
            gate = f"missing ({err})"
        lines.append(f"  {version:32} {weight:3d}%  release gate: {gate}")
    history = book.history(name)[-last:]
    if history:
        lines.append("last changes:")
    for row in reversed(history):
        override = f" override: {row['override']!r}" if row.get("override") else ""
        override += f" ({row['reason']})" if row.get("reason") else ""
        lines.append(
            f"  {row['time']} {row['action']:8} by {row['by']}: {split_text(row['from'])} → "
            f"{split_text(row['to'])}{override}"
        )
    return lines
