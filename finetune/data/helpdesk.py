"""Read a helpdesk export (one row per message) into :class:`Message` records.

Formats: CSV/TSV with a header row, JSON lines, or a JSON array of objects; nested objects are
flattened one level (Intercom's ``author: {type, name}`` becomes ``author.type``,
``author.name``). Columns are found by the names Zendesk, Freshdesk, Intercom and most home-made
exports use (:data:`COLUMNS`), or named with ``columns={"ticket": ..., "text": ...}``;
``columns={"intent": None}`` reads no intent column.

Roles (:data:`ROLE_VALUES`, case-insensitive): customer/user/requester/end-user/contact/...
become ``user``; agent/support/staff/assistant/admin/operator/bot become ``assistant``;
system/note/internal/private become ``drop`` (internal notes and helpdesk events are never
said to the customer, so they are neither trained on nor used as a system prompt). Other values
are kept as written and the conversation is skipped with a sentence; ``roles=`` maps them.

File-level problems (missing, empty, binary, UTF-16, too big, no usable columns) raise
:class:`DataError`; a row without a ticket id or a JSON line that does not parse is counted
and left out (its line number is named), so one broken row never blocks an import.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from core.user_text import cut, quote
from finetune.data.checks import DataError, check_text_file
from finetune.data.load import checked_path, max_data_bytes

# Field -> column names looked for, first match wins (compared in lower case).
COLUMNS = {
    "ticket": (
        "ticket_id",
        "conversation_id",
        "ticket",
        "conversation",
        "thread_id",
        "case_id",
        "case_number",
        "ticket_number",
        "chat_id",
        "session_id",
        "conversation.id",
    ),
    "role": (
        "role",
        "author_role",
        "author_type",
        "author.type",
        "sender_type",
        "sender_role",
        "from_type",
        "user_type",
        "speaker",
        "direction",
        "author.role",
        "from",
    ),
    "name": (
        "author_name",
        "author.name",
        "sender_name",
        "agent_name",
        "from_name",
        "user_name",
        "display_name",
        "name",
        "author",
        "sender",
    ),
    "text": (
        "text",
        "body",
        "message",
        "content",
        "comment",
        "plain_body",
        "body_text",
        "message_text",
        "value",
    ),
    "time": (
        "timestamp",
        "created_at",
        "created",
        "sent_at",
        "time",
        "datetime",
        "date",
        "created_time",
    ),
    # The ticket's label, read once per ticket (finetune.data.intents): the most deliberate
    # field first (an intent or category an agent picks), then tags, then the coarse type.
    "intent": (
        "intent",
        "intent_name",
        "ticket_intent",
        "category",
        "ticket_category",
        "ticket.category",
        "topic",
        "topics",
        "ticket_topic",
        "contact_reason",
        "reason",
        "issue_type",
        "tags",
        "tag",
        "ticket_tags",
        "ticket.tags",
        "tags.tags",
        "labels",
        "label",
        "ticket_type",
        "ticket.type",
        "type",
    ),
}
REQUIRED = ("ticket", "role", "text")
ROLE_VALUES = {
    **dict.fromkeys(
        (
            "customer",
            "user",
            "requester",
            "end-user",
            "end_user",
            "enduser",
            "contact",
            "client",
            "visitor",
            "lead",
            "human",
            "incoming",
            "buyer",
        ),
        "user",
    ),
    **dict.fromkeys(
        (
            "agent",
            "support",
            "staff",
            "assistant",
            "admin",
            "operator",
            "bot",
            "outgoing",
            "representative",
            "rep",
            "teammate",
        ),
        "assistant",
    ),
    **dict.fromkeys(
        (
            "system",
            "note",
            "internal",
            "internal_note",
            "internal note",
            "private",
            "private_note",
            "event",
            "log",
        ),
        "drop",
    ),
}
FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}


@dataclass
class Message:
    """One row of the export."""

    ticket: str
    role: str  # "user", "assistant", "drop", or the export's own value when unknown
    name: str  # author name ("" when the export has none)
    text: str
    time: float | None  # seconds since the epoch (UTC); None when missing or unreadable
    time_raw: str  # the timestamp as written, for sentences
    line: int  # data row number in the file (1 = first row after a CSV header)
    intent: object = None  # the intent column's cell as read (a JSON list stays a list)


@dataclass
class ExportRows:
    """What :func:`read_export` found."""

    messages: list[Message]
    columns: dict  # field -> column used
    rows_read: int
    rows_skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)  # first few skipped rows, as sentences
    names: list[str] = field(default_factory=list)  # every column of the file, in its order


def read_export(
    path, fmt: str | None = None, columns: dict | None = None, roles: dict | None = None
) -> ExportRows:
    """Every message row of a helpdesk export.

    Args:
        path: a .csv/.tsv/.jsonl/.ndjson/.json file.
        fmt: ``csv``, ``jsonl`` or ``json``; default from the file name (or its first byte).
        columns: ``{field: column}`` overriding detection; fields are ``ticket``, ``role``,
            ``name``, ``text``, ``time`` and ``intent`` (None: that field is not read).
        roles: ``{export value: "user" | "assistant" | "drop"}`` added to :data:`ROLE_VALUES`.

    Raises:
        DataError: the file cannot be read, or the ticket/role/text columns are not found.
    """
    p = checked_path(str(path))
    if not p.is_file():
        raise DataError(f"helpdesk export {cut(str(path))} does not exist or is not a file")
    check_text_file(p, max_data_bytes())
    fmt = fmt or _guess_format(p)
    out = ExportRows([], {}, 0)
    rows = _csv_rows(p) if fmt == "csv" else _json_rows(p, fmt, out)
    role_values = {**ROLE_VALUES, **{k.strip().lower(): v for k, v in (roles or {}).items()}}
    for line, row in rows:
        if not out.columns:
            out.names = list(row)
            out.columns = map_columns(out.names, columns or {}, p.name)
        out.rows_read += 1
        message = _message(row, out.columns, role_values, line)
        if isinstance(message, str):
            out.rows_skipped["no_ticket_id"] += 1
            _example(out, message)
        else:
            out.messages.append(message)
    if out.rows_read == 0:
        raise DataError(
            f"{p.name}: has no message rows" + (f" ({out.examples[0]})" if out.examples else "")
        )
    return out


def map_columns(names: list[str], explicit: dict, source: str) -> dict:
    """``{field: column}`` for this file's columns; explicit names must exist."""
    by_lower = {str(n).lower(): n for n in names}
    found = ", ".join(map(str, names)) or "none"
    unknown = sorted(set(explicit) - set(COLUMNS))
    if unknown:
        raise DataError(f"unknown column field(s) {', '.join(unknown)}; use {', '.join(COLUMNS)}")
    mapping = {}
    for fld, aliases in COLUMNS.items():
        if fld in explicit and explicit[fld] is None:
            mapping[fld] = None  # switched off (--no-intent)
        elif fld in explicit:
            if explicit[fld] not in names:
                raise DataError(
                    f"{source}: column {quote(explicit[fld])} (for {fld}) is not in the "
                    f"export (columns: {found})"
                )
            mapping[fld] = explicit[fld]
        else:
            used = set(mapping.values())
            mapping[fld] = next(
                (by_lower[a] for a in aliases if a in by_lower and by_lower[a] not in used), None
            )
    missing = [f for f in REQUIRED if mapping[f] is None]
    if missing:
        raise DataError(
            f"{source}: no column for the {' / '.join(missing)} (columns: {found}); expected a "
            "ticket id, an author role and the message text per row (e.g. ticket_id, role, text), "
            "or name them with --column-map ticket=...,role=...,text=..."
        )
    return {f: c for f, c in mapping.items() if c is not None}


def parse_column_map(text: str) -> dict:
    """``"ticket=case_no,text=msg"`` -> ``{"ticket": "case_no", "text": "msg"}``."""
    return _pairs(text, "column map")


def parse_role_map(text: str) -> dict:
    """``"Member=user,Rep=assistant"`` -> a ``roles`` dict for :func:`read_export`."""
    roles = _pairs(text, "role map")
    bad = sorted(v for v in roles.values() if v not in ("user", "assistant", "drop"))
    if bad:
        raise DataError(f"role map: roles must be user, assistant or drop (got {', '.join(bad)})")
    return roles


def parse_intent_tags(text: str) -> dict:
    """``"wismo=track_order,Refund=get_refund"`` -> ``{tag: intent}`` for the import."""
    return _pairs(text, "intent tags")


def _pairs(text: str, what: str) -> dict:
    pairs = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise DataError(f"{what}: {quote(item, 60)} is not NAME=VALUE (e.g. text=body)")
        pairs[key.strip()] = value.strip()
    return pairs


def parse_time(value) -> float | None:
    """Seconds since the epoch from ISO 8601 text or epoch seconds/milliseconds; None if neither."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        return number / 1000 if abs(number) > 1e11 else number  # 1e11 s is the year 5138
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:  # naive times are read as UTC, the same for every row
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _message(row: dict, cols: dict, role_values: dict, line: int) -> Message | str:
    ticket = _cell(row.get(cols["ticket"]))
    if not ticket:
        return f"row {line}: no ticket id in column {cols['ticket']!r}; the row is left out"
    raw_role = _cell(row.get(cols["role"]))
    time_raw = _cell(row.get(cols["time"])) if "time" in cols else ""
    return Message(
        ticket=ticket,
        role=role_values.get(raw_role.lower(), raw_role),
        name=_cell(row.get(cols["name"])) if "name" in cols else "",
        text=_cell(row.get(cols["text"]), strip=False),
        time=parse_time(time_raw) if time_raw else None,
        time_raw=time_raw,
        line=line,
        intent=row.get(cols["intent"]) if "intent" in cols else None,
    )


def _cell(value, strip: bool = True) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSON ticket id 1042.0 is ticket "1042"
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value)
        if isinstance(value, (list, dict))
        else str(value)
    )
    return text.strip() if strip else text


def _guess_format(p: Path) -> str:
    if p.suffix.lower() in FORMATS:
        return FORMATS[p.suffix.lower()]
    with open(p, "rb") as fh:
        first = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return {b"{": "jsonl", b"[": "json"}.get(first, "csv")


def _csv_rows(p: Path):
    """(row number, {column: text}) for each CSV/TSV row; no field-size limit (one oversized
    message must reach the conversation check, not stop the reader)."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, p.stat().st_size + 1))
    try:
        with open(p, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t" if p.suffix.lower() == ".tsv" else ",")
            if not reader.fieldnames:
                raise DataError(f"{p.name}: no header row; expected column names on the first line")
            for line, row in enumerate(reader, 1):
                row.pop(None, None)  # cells beyond the header
                yield line, row
    except csv.Error as err:
        raise DataError(f"{p.name}: not readable as CSV ({err})") from None
    finally:
        csv.field_size_limit(old)


def _json_rows(p: Path, fmt: str, out: ExportRows):
    """(line or item number, flattened row) for each JSON object; broken lines are counted."""
    if fmt == "json":
        try:
            items = json.loads(p.read_text(encoding="utf-8-sig"))
        except (ValueError, RecursionError) as err:
            raise DataError(
                f"{p.name}: not valid JSON ({str(err)[:200]}); expected an array of "
                "message objects, or use --format jsonl for JSON lines"
            ) from None
        if not isinstance(items, list):
            raise DataError(f"{p.name}: the JSON is not an array of message objects")
        yield from _json_items(enumerate(items, 1), p, out)
        return
    with open(p, encoding="utf-8-sig") as fh:
        yield from _json_items(((n, text) for n, text in enumerate(fh, 1) if text.strip()), p, out)


def _json_items(items, p: Path, out: ExportRows):
    for n, item in items:
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except (ValueError, RecursionError) as err:
                out.rows_skipped["unreadable_row"] += 1
                _example(
                    out, f"line {n}: not a JSON object ({str(err)[:120]}); the line is left out"
                )
                continue
        if not isinstance(item, dict):
            out.rows_skipped["unreadable_row"] += 1
            _example(
                out, f"{p.name} item {n}: is {type(item).__name__}, not a message object; left out"
            )
            continue
        yield n, _flatten(item)


def _flatten(row: dict) -> dict:
    flat = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _example(out: ExportRows, sentence: str) -> None:
    if len(out.examples) < 5:
        out.examples.append(sentence)
