"""Helpdesk export -> redacted conversations, split by conversation, written as JSON lines.

``import_transcripts(path)`` reads the export (``finetune.data.helpdesk``), groups its messages
by ticket, orders each ticket by timestamp (stable: equal or missing times keep file order),
drops internal notes, merges consecutive messages from the same side, and redacts personal data
(``core.redact``). The output rows are ``{"conversation_id", "messages"}`` in the
OpenAI shape the training pipeline reads (``finetune.data.conversations``), plus ``intent``
(the ticket's label, or None when it has none) wherever the export has an intent, category,
topic or tags column (``finetune.data.intents``); training reads it as the rows' label column.

A ticket that cannot be trained on is skipped, counted by reason, and described in a sentence:
no agent reply, no customer message, a message over ``MAX_MESSAGE_CHARS`` (a 10 MB message
skips its ticket, never the import), an unknown author role, unreadable timestamps. Agent
messages before the customer's first one (proactive outreach, greetings) and customer messages
after the last agent reply are dropped from the ticket and counted: training starts with a
customer turn and ends with an agent turn.

``split_conversations`` puts every conversation wholly in train or eval (seeded);
``import_to_folder`` writes ``train.jsonl``, ``eval.jsonl`` and ``import_stats.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from core.redact import name_patterns, redact
from core.user_text import quote
from finetune.data.checks import DataError
from finetune.data.conversations import MAX_MESSAGE_CHARS, BadConversation, parse_messages
from finetune.data.helpdesk import Message, read_export
from finetune.data.intents import is_tags_column, ticket_intent

SKIP_REASONS = {
    "no_agent_reply": "no agent reply after the customer's first message",
    "no_customer_message": "no customer message",
    "too_large": "a message over the size limit",
    "unknown_role": "an author role that is neither customer nor agent",
    "bad_timestamp": "a timestamp that could not be read",
}


@dataclass
class ImportResult:
    """Conversations ready to train on, and what the import did."""

    conversations: list[dict]  # {"conversation_id": ticket, "messages": [{role, content}]}
    stats: dict


class _Skip(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def import_transcripts(
    path,
    fmt: str | None = None,
    columns: dict | None = None,
    roles: dict | None = None,
    intent_tags: dict | None = None,
) -> ImportResult:
    """Read, group, order, clean and redact a helpdesk export.

    Args:
        path: the export file (CSV/TSV, JSON lines or a JSON array; one row per message).
        fmt: ``csv``, ``jsonl`` or ``json`` (default: from the file name).
        columns: ``{field: column}`` for ``ticket``, ``role``, ``name``, ``text``, ``time``,
            ``intent`` (``{"intent": None}``: no intent is read).
        roles: extra ``{export role value: "user" | "assistant" | "drop"}``.
        intent_tags: ``{tag: intent}``; a ticket holding a mapped tag gets its intent.

    Raises:
        DataError: the file cannot be read, or no ticket gives a usable conversation (the
            message counts the reasons and quotes the first ones).
    """
    export = read_export(path, fmt, columns, roles)
    intent_column = export.columns.get("intent")
    names = _author_names(export.messages)
    patterns = name_patterns(names["assistant"], names["user"])
    tickets: dict[str, list[Message]] = {}
    for m in export.messages:
        tickets.setdefault(m.ticket, []).append(m)
    skipped, dropped, redactions = Counter(), Counter(), Counter()
    examples = list(export.examples)
    conversations = []
    for ticket, rows in tickets.items():
        found = Counter()
        try:
            turns = _turns(ticket, rows, dropped)
            messages = [{"role": r, "content": redact(t, patterns, found)} for r, t in turns]
            messages = parse_messages(messages, f"ticket {quote(ticket, 40)}")
        except (_Skip, BadConversation) as skip:
            skipped[skip.reason] += 1
            if len(examples) < 8:
                examples.append(skip.detail)
            continue
        conversation = {"conversation_id": ticket, "messages": messages}
        if intent_column is not None:
            label = ticket_intent(
                [m.intent for m in rows], is_tags_column(intent_column), intent_tags
            )
            conversation["intent"] = None if label is None else redact(label, patterns, found)
        redactions.update(found)
        conversations.append(conversation)
    stats = {
        "source": Path(str(path)).name,
        "columns": export.columns,
        "rows_read": export.rows_read,
        "rows_skipped": dict(export.rows_skipped),
        "tickets": len(tickets),
        "conversations": len(conversations),
        "messages": sum(len(c["messages"]) for c in conversations),
        "skipped": dict(skipped),
        "dropped": dict(dropped),
        "redactions": {k: redactions[k] for k in sorted(redactions)},
        "examples": examples,
        "intent": _intent_stats(conversations, intent_column, columns),
        "file_columns": export.names,
    }
    if not conversations:
        why = ", ".join(f"{n} {SKIP_REASONS.get(r, r)}" for r, n in skipped.items()) or "no tickets"
        raise DataError(
            f"{stats['source']}: none of the {len(tickets)} tickets gives a conversation "
            f"to train on ({why}); " + "; ".join(examples[:3])
        )
    return ImportResult(conversations, stats)


def split_conversations(
    conversations: list[dict], eval_fraction: float, seed: int
) -> tuple[list, list]:
    """(train, eval): each conversation wholly on one side; the same seed, the same split.

    Conversations are ranked by a seeded hash of their id (not by file position), and the
    first ``round(n * eval_fraction)`` go to eval: at least one when the fraction is above 0
    and there are two conversations or more, never all.
    """
    if not 0 <= eval_fraction < 1:
        raise ValueError(f"eval fraction must be at least 0 and below 1 (got {eval_fraction})")
    n = len(conversations)
    n_eval = round(n * eval_fraction)
    if eval_fraction > 0 and n >= 2:
        n_eval = min(max(n_eval, 1), n - 1)

    def rank(i: int) -> str:
        key = f"{seed}\0{conversations[i]['conversation_id']}"
        return hashlib.sha256(key.encode()).hexdigest()

    held = set(sorted(range(n), key=rank)[:n_eval])
    train = [c for i, c in enumerate(conversations) if i not in held]
    return train, [c for i, c in enumerate(conversations) if i in held]


def import_to_folder(
    path,
    out,
    eval_fraction: float = 0.1,
    seed: int = 42,
    fmt: str | None = None,
    columns: dict | None = None,
    roles: dict | None = None,
    intent_tags: dict | None = None,
) -> dict:
    """Import an export and write ``train.jsonl``, ``eval.jsonl`` (when not empty) and
    ``import_stats.json`` to ``out``; the stats, with the files' paths, are returned.

    Raises:
        ValueError: ``out`` is a file, or holds a train.jsonl / eval.jsonl no import wrote
            (before the export is read).
    """
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"{out} is a file; name a folder for train.jsonl and eval.jsonl")
    # An earlier import's files are replaced (its import_stats.json says so); other data is not.
    theirs = [n for n in ("train.jsonl", "eval.jsonl") if (Path(out) / n).exists()]
    if theirs and not (Path(out) / "import_stats.json").is_file():
        raise ValueError(
            f"{out} holds {', '.join(theirs)} that no import wrote; they are left as they are: "
            "name a new folder for the import"
        )
    result = import_transcripts(path, fmt, columns, roles, intent_tags)
    train, held = split_conversations(result.conversations, eval_fraction, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stats = {
        **result.stats,
        "conversations_train": len(train),
        "conversations_eval": len(held),
        "eval_fraction": eval_fraction,
        "seed": seed,
        "train_file": str(out / "train.jsonl"),
        "eval_file": str(out / "eval.jsonl") if held else None,
    }
    # The stats first: a kill between the files leaves a folder the next import may write over.
    _write_text(out / "import_stats.json", json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    _write_jsonl(out / "train.jsonl", train)
    if held:
        _write_jsonl(out / "eval.jsonl", held)
    else:
        (out / "eval.jsonl").unlink(missing_ok=True)  # an older import's held-out file
    return stats


def _intent_stats(conversations: list[dict], column: str | None, columns: dict | None) -> dict:
    """Which column gave intents, how many conversations got one, and each label's count."""
    labels = Counter(c["intent"] for c in conversations if c.get("intent") is not None)
    return {
        "column": column,
        "off": column is None and "intent" in (columns or {}),
        "conversations": sum(labels.values()),
        "labels": dict(labels.most_common()),
    }


def _author_names(messages: list[Message]) -> dict[str, set]:
    names: dict[str, set] = {"user": set(), "assistant": set()}
    for m in messages:
        if m.name and m.role in names:
            names[m.role].add(m.name)
    return names


def _turns(ticket: str, rows: list[Message], dropped: Counter) -> list[tuple[str, str]]:
    """The ticket as alternating (role, text) turns, customer first, agent last."""
    where = f"ticket {quote(ticket, 40)}"
    for m in rows:
        if m.role not in ("user", "assistant", "drop"):
            raise _Skip(
                "unknown_role",
                f"{where}: row {m.line} has the author role {quote(m.role, 40)}, "
                "neither a customer nor an agent role (map it with --role-map VALUE=user)",
            )
        if len(m.text) > MAX_MESSAGE_CHARS:
            raise _Skip(
                "too_large",
                f"{where}: row {m.line} holds {len(m.text) / 1e6:.1f} M characters; one message "
                f"may hold at most {MAX_MESSAGE_CHARS / 1e6:.0f} M, so the ticket is left out",
            )
    kept = [m for m in rows if m.role != "drop" and m.text.strip()]
    dropped["internal_notes"] += sum(m.role == "drop" for m in rows)
    dropped["empty_messages"] += sum(m.role != "drop" and not m.text.strip() for m in rows)
    kept = _ordered(where, kept)
    turns: list[list] = []
    for m in kept:
        if turns and turns[-1][0] == m.role:
            turns[-1][1] += "\n\n" + m.text.strip()  # one side writing twice in a row: one turn
            dropped["merged_into_previous"] += 1
        else:
            turns.append([m.role, m.text.strip()])
    if not any(r == "user" for r, _ in turns):
        raise _Skip("no_customer_message", f"{where}: has no customer message, only the agent's")
    if turns[0][0] == "assistant":
        turns.pop(0)
        dropped["agent_messages_before_customer"] += 1
    if turns[-1][0] == "user":
        turns.pop()
        dropped["unanswered_customer_messages"] += 1
    if not turns:
        raise _Skip(
            "no_agent_reply", f"{where}: has no agent reply after the customer's first message"
        )
    return [(r, t) for r, t in turns]


def _ordered(where: str, rows: list[Message]) -> list[Message]:
    """By timestamp, stable; a ticket without timestamps keeps file order."""
    unread = [m for m in rows if m.time is None]
    if len(unread) == len(rows):
        return rows
    if unread:
        m = unread[0]
        shown = quote(m.time_raw, 40) if m.time_raw else "no timestamp"
        raise _Skip(
            "bad_timestamp",
            f"{where}: row {m.line} has {shown}, not an ISO 8601 time or "
            "epoch seconds, so its place in the conversation is unknown",
        )
    return sorted(rows, key=lambda m: m.time)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    _write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _write_text(path: Path, text: str) -> None:
    """Write beside ``path`` and rename: an interrupted import leaves no half file to train on."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
