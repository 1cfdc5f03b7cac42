"""The review queue: ratings filtered, corrected, accepted or dropped, and the accepted ones
turned into training data.

A rating starts ``new``. A reviewer may edit its correction and its intent label, then
``accept`` or ``drop`` it.
Accepted ratings become two datasets the Train tab and ``python -m finetune train`` take:

- SFT rows: ``messages``, the conversation (system turns left out: training adds its own)
  ending with, for a thumbs-down, its correction, for a thumbs-up the answer as sent (a
  thumbs-up takes no correction, from the rater or the reviewer) as the assistant's turn,
  which the training data loader reads as a conversation; ``instruction`` and ``response``
  repeat the last customer message and that answer for reading.
- preference pairs (``prompt``, ``chosen``, ``rejected``): the conversation, the correction,
  and the answer that got the thumbs-down. A thumbs-down without a correction makes no row.
  A Compare verdict is such a thumbs-down per losing pane (``feedback/compare.py``): chosen =
  the preferred pane or the written answer, rejected = the pane that lost; its panes share
  one SFT row.

Only ratings whose conversation was kept (Chat, or ``/v1`` with ``--log-conversations``) can
become training data, and not those of a tool-calling answer (relayed to llama-server: the
rows hold no tool calls nor the tools offered); accepting one says why. Nor may any exported
text spell a chat template's control token (``<|im_start|>`` ...): an export that would write
one writes nothing and names the ratings to correct or drop.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from core.redact import redact
from core.store.tables import rating_for_update, update_rating
from core.user_text import unicode_problem
from feedback.store import FeedbackStore, check_correction, check_intent, control_spelling

STATUSES = ("new", "accepted", "dropped")


def as_day(text: str | None) -> str | None:
    """``text`` when it is a real calendar day written YYYY-MM-DD (spaces around it dropped),
    else None: what a ``since`` / ``until`` filter takes."""
    import datetime
    import re

    text = (text or "").strip()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return None
    return text


@dataclass
class Filter:
    """Which ratings to show (None: any)."""

    adapter: str | None = None
    version: str | None = None
    rating: str | None = None
    status: str | None = None
    intent: str | None = None  # the same label, whatever its case
    since: str | None = None  # "2026-11-25": created on or after that day
    until: str | None = None  # created on or before that day

    def keeps(self, row: dict) -> bool:
        day = str(row.get("created", ""))[:10]
        return all(
            (
                self.adapter in (None, row.get("adapter")),
                self.version is None or str(row.get("version", "")).startswith(self.version),
                self.rating in (None, row.get("rating")),
                self.status in (None, row.get("status", "new")),
                self.intent is None
                or str(row.get("intent") or "").casefold() == self.intent.strip().casefold(),
                self.since is None or day >= self.since,
                self.until is None or day <= self.until,
            )
        )


def queue(store: FeedbackStore, where: Filter | None = None) -> list[dict]:
    """The ratings that pass ``where``, newest first."""
    where = where or Filter()
    return [r for r in reversed(store.ratings()) if where.keeps(r)]


def review(
    store: FeedbackStore,
    row_id: str,
    status: str | None = None,
    correction: str | None = None,
    intent: str | None = None,
) -> dict:
    """Set a rating's status, correction and/or intent (``""`` clears it); returns the row as saved.

    Raises:
        KeyError: no rating with that id. ValueError: an unknown status, a correction too long
            or not valid Unicode, a correction of a thumbs-up, an intent that is not one short
            line, or accepting a row that cannot become training data (no conversation kept, a
            tool-calling answer).
    """
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    check_correction(correction)
    label = check_intent(intent)
    if unicode_problem(row_id) is not None:  # no rating's id holds one (argv's undecodable bytes)
        raise KeyError(row_id)
    with store.store.transaction():  # one row, locked: a rating given meanwhile is never lost
        found = rating_for_update(store.store, row_id)
        if found is None:
            raise KeyError(row_id)
        if correction is not None and correction.strip() and found.get("rating") == "up":
            raise ValueError(
                "this rating is a thumbs-up: it approves the answer as sent, so it takes no "
                "correction (a correction goes with a thumbs-down); accept or drop it as it is"
            )
        if correction is not None:
            found["correction"] = redact(correction.strip()) or None
        if intent is not None:
            found["intent"] = label
        if status == "accepted" and not found.get("messages"):
            raise ValueError(
                "this rating kept no conversation (the API ran without --log-conversations), "
                "so it cannot become training data; drop it"
            )
        if status == "accepted" and found.get("tool_calls"):
            called = ", ".join(sorted({str(c.get("name")) for c in found["tool_calls"]}))
            raise ValueError(
                f"this answer called tools ({called}): training data holds no tool calls nor "
                "the tools offered, so it cannot become training data; drop it (its vote still "
                "counts in its version's thumbs-down rate)"
            )
        if status is not None:
            found["status"] = status
        update_rating(store.store, found)
    return found


def training_rows(store: FeedbackStore) -> tuple[list[dict], list[dict]]:
    """(SFT rows, preference pairs) from the accepted ratings, oldest first."""
    sft, pairs, verdicts = [], [], set()
    for row in store.ratings():
        messages = row.get("messages") or []
        if row.get("status") != "accepted" or not messages or row.get("tool_calls"):
            continue
        asked = [m for m in messages if m.get("role") != "system"]
        last_user = next((m["content"] for m in reversed(asked) if m.get("role") == "user"), None)
        if last_user is None:
            continue
        # a thumbs-up approves the answer as sent (a correction kept on one, from before votes
        # changed to up dropped theirs, is not what the rater approved)
        good = row.get("answer") if row.get("rating") == "up" else row.get("correction")
        if (
            good and (row.get("verdict"), good) not in verdicts
        ):  # a Compare verdict's panes: one SFT row
            if row.get("verdict"):
                verdicts.add((row["verdict"], good))
            sft.append(
                {
                    "messages": [*asked, {"role": "assistant", "content": good}],
                    "instruction": last_user,
                    "response": good,
                    "intent": row.get("intent"),
                    "source": f"feedback:{row['id']}",
                    "adapter": row.get("adapter"),
                    "version": row.get("version"),
                }
            )
        if row.get("rating") == "down" and row.get("correction") and row.get("answer"):
            pairs.append(
                {
                    "prompt": messages,
                    "chosen": row["correction"],
                    "rejected": row["answer"],
                    "intent": row.get("intent"),
                    "source": f"feedback:{row['id']}",
                    "adapter": row.get("adapter"),
                    "version": row.get("version"),
                }
            )
    return sft, pairs


def export(
    store: FeedbackStore, folder: Path, name: str = "feedback", overwrite: bool = False
) -> tuple[Path, Path, int, int]:
    """Write the accepted ratings as ``<name>.jsonl`` (SFT) and ``<name>-pairs.jsonl``;
    ``overwrite``: replace those files where they exist (else the export is refused: either may
    be a dataset of someone's own).

    Raises:
        ValueError: either file exists and ``overwrite`` is not given; nothing is written.
        ValueError: nothing accepted yet, or accepted ratings whose rows would spell a chat
            template's control token (kept before corrections were checked, or typed in Chat):
            how many, which, and what to do; nothing is written.
    """
    sft, pairs = training_rows(store)
    if not sft and not pairs:
        raise ValueError(
            "no accepted feedback with a conversation yet: accept some in the review queue first"
        )
    check_spellings([*sft, *pairs])
    out = (folder / f"{name}.jsonl", folder / f"{name}-pairs.jsonl")
    there = [p.name for p in out if p.exists()]
    if there and not overwrite:
        one = len(there) == 1  # the folder by its name: errors name no server paths
        raise ValueError(
            f"{' and '.join(there)} already exist{'s' if one else ''} in {folder.name}/, so "
            "nothing was written: export under another name (python -m feedback export "
            f"--overwrite replaces {'it' if one else 'them'})"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for path, rows in zip(out, (sft, pairs), strict=True):
        _rewrite(path, rows)
    return out[0], out[1], len(sft), len(pairs)


def check_spellings(rows: list[dict]) -> None:
    """Refuse training rows any text of which spells a chat template's control token: trained
    on, it would be learnt as the markers the model's own turns are made of.

    Raises:
        ValueError: how many accepted ratings, which (the first 5), the first spelling, and how
            to correct or drop them.
    """
    spelled: dict[str, str] = {}  # rating id -> its first spelling, in the rows' order
    for row in rows:
        texts = [m.get("content") for m in row.get("messages") or row.get("prompt") or []]
        texts += [row.get(k) for k in ("response", "chosen", "rejected", "intent")]
        found = next((f for f in map(control_spelling, texts) if f), None)
        if found:
            spelled.setdefault(str(row["source"]).removeprefix("feedback:"), found)
    if not spelled:
        return
    ids = list(spelled)
    one = len(ids) == 1
    raise ValueError(
        f"{len(ids)} accepted rating{'' if one else 's'} spell{'s' if one else ''} a "
        f"chat-template control token ({spelled[ids[0]]!r}) in {'its' if one else 'their'} "
        f"correction, intent, conversation or answer: {', '.join(ids[:5])}"
        f"{' ...' if len(ids) > 5 else ''}; training data must hold none, so nothing was "
        "written. Correct the correction or intent, or drop the rating (the Review tab, or "
        "python -m feedback review ID --correction TEXT | --intent LABEL | --drop), then "
        "export again"
    )


def _rewrite(path: Path, rows: list[dict]) -> None:
    """Replace ``path`` with ``rows`` as JSON lines, whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
