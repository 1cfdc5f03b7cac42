"""Column mapping and row normalization: any supported table shape becomes the same rows.

A normalized row has ``prompt`` (the user's last message), ``response`` (the assistant reply to
learn), ``intent`` (or None) and ``history`` (JSON list of earlier ``{role, content}`` turns,
or an empty string for single-turn rows). Placeholders such as ``{{Order Number}}`` are
plain text here and stay literal: the chat template renders message content as a value, not
as template source.

Bad rows (missing, empty or non-text prompt/response, malformed ``messages``) are skipped and
counted by reason: one bad line in a 20 000-row export should not block training, and the
counts show up in the stats. If every row is bad, that is an error naming the first ones.
A field over :data:`MAX_FIELD_CHARS` is always an error: it is a broken export, not a row.
Message lists are checked per message instead (``finetune.conversations.parse_messages``): a
conversation with an oversized message, no assistant turn or roles out of order is skipped
and counted like any bad row.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from core.columns import MESSAGES_NAMES, PROMPT_NAMES, RESPONSE_NAMES
from core.user_text import quote
from finetune.data.conversations import BadConversation, parse_messages
from finetune.data.load import DataError

MAX_FIELD_CHARS = 4_000_000  # one prompt or response; real support replies are a few KB


@dataclass
class ColumnMapping:
    """Which columns of the source hold what."""

    prompt: str | None = None  # user message column (pairs shape)
    response: str | None = None  # assistant reply column (pairs shape)
    messages: str | None = None  # column of chat message lists (messages shape)
    intent: str | None = None  # optional label column, used for stats and eval breakdowns
    context: str | None = None  # Alpaca-style "input" appended to the instruction

    def describe(self) -> str:
        if self.messages:
            text = f"messages={self.messages}"
        else:
            text = f"prompt={self.prompt}, response={self.response}"
            text += f", context={self.context}" if self.context else ""
        return text + (f", intent={self.intent}" if self.intent else "")


def detect_mapping(column_names: list[str], args) -> ColumnMapping:
    """Pick the prompt/response (or messages) columns; explicit DataArgs fields win.

    Args:
        column_names: the dataset's columns.
        args: a ``DataArgs`` (``prompt_column``, ``response_column``, ``messages_column``).

    Raises:
        DataError: a named column is missing, or no known shape matches; the message lists
            the columns found and the shapes expected.
    """
    by_lower = {c.lower(): c for c in column_names}
    found = ", ".join(column_names)
    for field in ("messages_column", "prompt_column", "response_column"):
        name = getattr(args, field, None)
        if name and name not in column_names:
            raise DataError(
                f"{field.replace('_', ' ')} {quote(name)} is not in the data (columns: {found})"
            )
    intent = by_lower.get("intent")
    if args.messages_column:
        return ColumnMapping(messages=args.messages_column, intent=intent)
    if not (args.prompt_column or args.response_column):
        messages = _first(by_lower, MESSAGES_NAMES)
        if messages:
            return ColumnMapping(messages=messages, intent=intent)
    prompt = args.prompt_column or _first(by_lower, PROMPT_NAMES)
    response = args.response_column or _first(by_lower, RESPONSE_NAMES, exclude=prompt)
    if prompt is None or response is None or prompt == response:
        raise DataError(
            f"could not tell which columns hold the prompt and the response (columns: {found}); "
            "expected instruction/response, prompt/completion, question/answer, input/output "
            "or a messages column, or name them with --prompt-column and --response-column"
        )
    context = by_lower.get("input") if prompt.lower() == "instruction" else None
    return ColumnMapping(
        prompt=prompt,
        response=response,
        intent=intent,
        context=context if context != response else None,
    )


def normalize(
    ds, mapping: ColumnMapping, source: str, extra: str | None = None
) -> tuple[dict, Counter, list[str]]:
    """Rows of ``ds`` as normalized columns, plus skip counts by reason and the first few skips.

    Args:
        extra: another column to carry along as ``rows["extra"]`` (text, or None when empty),
            row-aligned with the others; evaluation slices by it. Training never asks for it.

    Raises:
        DataError: a field is over ``MAX_FIELD_CHARS``, or no row is usable.
    """
    cols = [
        c
        for c in (
            mapping.prompt,
            mapping.response,
            mapping.messages,
            mapping.intent,
            mapping.context,
        )
        if c
    ]
    if extra and extra not in cols:
        cols.append(extra)
    rows: dict[str, list] = {"prompt": [], "response": [], "intent": [], "history": []}
    if extra:
        rows["extra"] = []
    skipped: Counter = Counter()
    examples: list[str] = []
    index = 0
    for batch in ds.select_columns(cols).iter(batch_size=1000):
        for values in zip(*(batch[c] for c in cols), strict=True):
            index += 1
            row = dict(zip(cols, values, strict=True))
            _check_size(row, index, source, mapping.messages)
            try:
                prompt, response, history = _extract(row, mapping)
            except _BadRow as bad:
                skipped[bad.reason] += 1
                if len(examples) < 5:
                    examples.append(f"row {index}: {bad.detail}")
                continue
            intent = row.get(mapping.intent) if mapping.intent else None
            rows["prompt"].append(prompt)
            rows["response"].append(response)
            rows["intent"].append(None if intent is None else str(intent))
            rows["history"].append(history)
            if extra:
                rows["extra"].append(_label(row.get(extra)))
    if not rows["prompt"]:
        raise DataError(
            f"{source}: none of the {index} rows is usable ({mapping.describe()}); "
            + "; ".join(examples)
        )
    return rows, skipped, examples


def _label(value) -> str | None:
    """A slice label: text as is, numbers and lists as JSON, empty -> None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return value.strip() if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _BadRow(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _first(by_lower: dict, names: tuple, exclude: str | None = None) -> str | None:
    return next((by_lower[n] for n in names if n in by_lower and by_lower[n] != exclude), None)


def _check_size(row: dict, index: int, source: str, skip: str | None = None) -> None:
    for col, value in row.items():
        if col == skip:  # a messages list: each message is checked (and a bad row skipped)
            continue
        size = (
            len(value)
            if isinstance(value, str)
            else len(json.dumps(value))
            if isinstance(value, (list, dict))
            else 0
        )
        if size > MAX_FIELD_CHARS:
            raise DataError(
                f"{source}: row {index}, column {col!r} holds {size / 1e6:.1f} M "
                f"characters; one field may hold at most {MAX_FIELD_CHARS / 1e6:.0f} M"
            )


def _text(value, col: str) -> str:
    if value is None:
        raise _BadRow("missing", f"{col} is missing")
    if not isinstance(value, str):
        raise _BadRow("not_text", f"{col} is {type(value).__name__}, expected text")
    value = value.strip()  # stray export whitespace would otherwise be learned verbatim
    if not value:
        raise _BadRow("empty", f"{col} is empty")
    return value


def _extract(row: dict, m: ColumnMapping) -> tuple[str, str, str]:
    if m.messages:
        return _from_messages(row[m.messages], m.messages)
    prompt = _text(row[m.prompt], m.prompt)
    if m.context and isinstance(row.get(m.context), str) and row[m.context].strip():
        prompt = f"{prompt}\n\n{row[m.context].strip()}"
    return prompt, _text(row[m.response], m.response), ""


def _from_messages(value, col: str) -> tuple[str, str, str]:
    """Last assistant turn is the reply, the user turn before it the prompt, the rest history."""
    try:
        turns = parse_messages(value, col)
    except BadConversation as bad:
        raise _BadRow(bad.reason, bad.detail) from None
    history = json.dumps(turns[:-2], ensure_ascii=False) if len(turns) > 2 else ""
    return turns[-2]["content"], turns[-1]["content"], history
