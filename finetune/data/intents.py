"""A helpdesk ticket's intent, from the export's intent / category / topic / tags column.

The column is found as the other columns are (``finetune.data.helpdesk.COLUMNS["intent"]``) or
named. A ticket's intent is read from its rows in file order: the first row whose cell gives
one wins (exports repeat a ticket's fields on each message row, or fill only some).

A cell is read as a list of candidates: a JSON list (of text, or of objects with a ``name``),
or text split at commas, semicolons and pipes; in a tags column (:data:`TAG_COLUMNS`) text with
none of those is split at spaces, as Zendesk writes its tags. The intent is the first candidate
``tag_map`` names (``--intent-tags TAG=INTENT``), else the first that is not a status,
priority, channel or message-kind word (:data:`IGNORED_TAGS`, or ``priority_...`` /
``status_...``) and holds at most :data:`MAX_INTENT_CHARS` characters (longer text is a note,
not a label). Labels are kept as written, stripped.
"""

from __future__ import annotations

import contextlib
import json
import re

TAG_COLUMNS = ("tags", "tag", "labels", "label", "ticket_tags", "ticket.tags", "tags.tags")
IGNORED_TAGS = frozenset(
    # priority
    ("urgent", "high", "medium", "low", "normal", "critical", "priority", "vip", "escalated")
    + ("p1", "p2", "p3", "p4")
    # status
    + ("new", "open", "pending", "hold", "on_hold", "solved", "resolved", "closed", "reopened")
    + ("spam",)
    # channel
    + ("email", "e_mail", "chat", "web", "phone", "sms", "api", "mobile", "whatsapp")
    + ("facebook", "twitter", "instagram")
    # message kind (a per-message "type" column), and empty placeholders
    + ("comment", "voicecomment", "message", "reply", "note", "none", "null", "n/a", "na")
)
IGNORED_PREFIXES = ("priority_", "status_")
MAX_INTENT_CHARS = 100


def ticket_intent(cells, tags: bool, tag_map: dict | None = None) -> str | None:
    """The intent of a ticket from its rows' cells (file order), or None when none gives one.

    Args:
        cells: the intent column's value on each of the ticket's rows (text, list or None).
        tags: the column is a tags column (space-separated text is a list).
        tag_map: ``{tag (lower case): intent}``; a mapped tag wins over the rule.
    """
    for cell in cells:
        found = cell_intent(cell, tags, tag_map)
        if found is not None:
            return found
    return None


def cell_intent(value, tags: bool, tag_map: dict | None = None) -> str | None:
    """The intent one cell gives (see the module's docstring), or None."""
    candidates = _candidates(value, tags)
    by_lower = {k.strip().lower(): v for k, v in (tag_map or {}).items()}
    mapped = next((by_lower[c.lower()] for c in candidates if c.lower() in by_lower), None)
    if mapped is not None:
        return mapped
    return next((c for c in candidates if _is_label(c)), None)


def is_tags_column(name: str) -> bool:
    """Whether a column of this name holds a ticket's tags (a list) rather than one value."""
    return str(name).strip().lower() in TAG_COLUMNS


def _candidates(value, tags: bool) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) and value.lstrip().startswith("["):
        with contextlib.suppress(ValueError):
            value = json.loads(value)  # a list a CSV cell holds as JSON text
    if isinstance(value, list):
        items = [v.get("name", "") if isinstance(v, dict) else v for v in value]
        return [str(v).strip() for v in items if v is not None and str(v).strip()]
    text = str(value)
    parts = re.split(r"[,;|]", text)
    if tags and len(parts) == 1:
        parts = text.split()
    return [p.strip() for p in parts if p.strip()]


def _is_label(tag: str) -> bool:
    key = re.sub(r"[\s-]+", "_", tag.lower())
    return (
        len(tag) <= MAX_INTENT_CHARS
        and key not in IGNORED_TAGS
        and not key.startswith(IGNORED_PREFIXES)
    )
