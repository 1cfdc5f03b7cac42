"""The feedback store: served answers and the ratings given to them, in the store.

Two tables of the home's store (``core/store``: ``<home>/tunedesk.db``, or the PostgreSQL that
``TUNEDESK_DATABASE_URL`` names):

- ``answers``: one row per served answer: its id, the adapter and version (weights hash) and
  engine that answered; the conversation and the answer too, redacted with the helpdesk
  import's redaction (``core/redact.py``), only when conversation logging is on
  (``--log-conversations``; off by default). Written after the answer, never while it streams.
- ``ratings``: one row per answer and rater: ``up`` or ``down``, an optional corrected answer
  (redacted; no NUL, no chat-template control token spelled), the answer's adapter and
  version, the conversation when it was logged, and an optional ``intent`` label (the
  caller's, or the reviewer's). A correction goes with a
  thumbs-down only: a thumbs-up approves the answer as sent, so it is refused with one and a
  vote changed to up drops the earlier vote's correction. The rater (an API key's name,
  a Chat or Compare session) has one vote per answer: rating again replaces the earlier
  rating, but a vote without a correction or intent, or with the very ones the rater gave last
  (a widget re-sending its body), keeps the kept ones (a reviewer's edit), and the review
  stands unless the vote changes something (``core/store/tables.py``). Each starts
  ``new`` for the review queue. Compare's verdicts land here too (``feedback/compare.py``).

The old ``feedback/answers.jsonl`` and ``ratings.jsonl`` are imported once, at first start, and
left as they were. Nothing leaves the home folder (or the database named).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.redact import redact
from core.store.home import open_store
from core.store.tables import get_answer, put_answer, put_ratings, rating_rows
from core.templates import COMMON_CONTROL
from core.user_text import check_unicode

RATINGS = ("up", "down")
MAX_CORRECTION_CHARS = 8000
MAX_INTENT_CHARS = 80


@dataclass
class ServedAnswer:
    """One answer as served: who gave it and, when logged, what was asked and answered."""

    id: str
    adapter: str  # "base" or the adapter's name
    version: str  # the weights hash of that adapter (or of the base)
    engine: str
    source: str  # "api" or "chat"
    created: str
    messages: list[dict] | None = None  # redacted; None when logging is off
    answer: str | None = None
    extra: dict = field(default_factory=dict)


class FeedbackStore:
    """Served answers and their ratings, in one home's store.

    Args:
        home: the home folder whose store it is (default ``$TUNEDESK_HOME``).
        log_conversations: keep each answer's conversation and text (redacted).
    """

    def __init__(self, home: Path | None = None, log_conversations: bool = False):
        self.store = open_store(home)
        self.log_conversations = log_conversations

    def record(
        self,
        answer_id: str,
        adapter: str,
        version: str,
        engine: str,
        messages: list[dict],
        text: str,
        source: str = "api",
        grounding: dict | None = None,
        check: dict | None = None,
        tool_calls: list[dict] | None = None,
        asked_by: str | None = None,
    ) -> ServedAnswer:
        """Keep one served answer (with its conversation, redacted, when logging is on);
        ``grounding``: the knowledge version and passage ids it was shown (``knowledge.grounding``),
        kept with it and with its ratings; ``check``: what the check before it was sent decided
        (``knowledge.answer_check``: ok, re-answered, handed off, skipped); ``tool_calls``: the
        functions a relayed tool-calling answer called, ``[{"name", "arguments"}]``, kept with
        it and its ratings (their arguments, redacted, only when logging is on); ``asked_by``:
        the name of the API key it was served to (who may rate it: ``serve/feedback_api.py``)."""
        extra = {"grounding": grounding} if grounding else {}
        if asked_by:
            extra["asked_by"] = asked_by
        if check:
            extra["check"] = check
        if tool_calls:
            extra["tool_calls"] = [
                {
                    "name": c["name"],
                    **({"arguments": redact(c["arguments"])} if self.log_conversations else {}),
                }
                for c in tool_calls
            ]
        served = ServedAnswer(answer_id, adapter, version, engine, source, _now(), extra=extra)
        if self.log_conversations:
            served.messages, served.answer = redacted(messages, text)
        put_answer(self.store, asdict(served))
        return served

    def answer(self, answer_id: str) -> ServedAnswer | None:
        """A served answer by id (None if none was served with it)."""
        if "\x00" in answer_id:  # no answer's id holds one; PostgreSQL refuses to look it up
            return None
        row = get_answer(self.store, answer_id)
        if row is None:
            return None
        return ServedAnswer(**{k: row.get(k) for k in ServedAnswer.__dataclass_fields__})

    def rate(
        self,
        answer_id: str,
        rating: str,
        correction: str | None = None,
        source: str = "api",
        intent: str | None = None,
        rater: str | None = None,
    ) -> dict:
        """Store a rating (and a corrected answer) for a served answer; returns the stored row.
        ``rater`` (an API key's name, a UI session) has one vote per answer: rating the same
        answer again replaces the earlier rating (the row keeps its id). Given no correction or
        intent, or the same ones ``rater`` gave last, the vote keeps the kept ones (a reviewer's
        edit); the review status stays when the vote says nothing new (the same rating, no other
        correction or intent) and goes back to ``new`` when it changes something.

        Raises:
            KeyError: no answer with this id was served here.
            ValueError: the rating is not up or down, the correction is not text, too long or
                given with a thumbs-up, or the intent is not a short line of text.
        """
        check_rating(rating, correction)
        intent = check_intent(intent)
        served = self.answer(answer_id)
        if served is None:
            raise KeyError(answer_id)
        row = rating_row(served, rating, correction, source, intent, rater=rater)
        return self.add(row)[0]

    def add(self, *rows: dict) -> list[dict]:
        """Store rating rows (from :func:`rating_row`), all of them or none; the rows as stored."""
        return put_ratings(self.store, *rows)

    def ratings(self) -> list[dict]:
        """Every stored rating, oldest first."""
        return rating_rows(self.store)


def rating_row(
    served: ServedAnswer,
    rating: str,
    correction: str | None,
    source: str,
    intent: str | None = None,
    **extra,
) -> dict:
    """A new rating of ``served`` as stored (``new``, its correction redacted);
    checked by the caller."""
    return {
        "id": f"fb-{uuid.uuid4().hex[:16]}",
        "answer_id": served.id,
        "created": _now(),
        "rating": rating,
        "correction": redact(correction.strip()) if correction and correction.strip() else None,
        "adapter": served.adapter,
        "version": served.version,
        "engine": served.engine,
        "source": source,
        "messages": served.messages,
        "answer": served.answer,
        "status": "new",
        "intent": intent,
        **_kept_with(served),
        **extra,
    }


def _kept_with(served: ServedAnswer) -> dict:
    """What a rating row repeats of its answer's extras: the knowledge it was shown, the tools
    it called (none of either when it had none)."""
    return {k: v for k, v in (served.extra or {}).items() if k in ("grounding", "tool_calls") and v}


def redacted(messages: list[dict], text: str) -> tuple[list[dict], str]:
    """(the conversation, the answer) as kept: plain text, personal data replaced, without NUL
    characters (no text a reviewer reads, and PostgreSQL's text columns refuse them)."""
    return (
        [
            {"role": m.get("role"), "content": _kept_text(content_text(m.get("content")))}
            for m in messages
        ],
        _kept_text(text),
    )


def _kept_text(text: str) -> str:
    return redact(text).replace("\x00", "")


def check_intent(intent) -> str | None:
    """An intent label as stored: stripped text, None when empty or absent.

    Raises:
        ValueError: not text, not valid Unicode (a lone surrogate), holding a NUL or a control
            token's spelling (:func:`check_no_control`), more than one line or longer than
            :data:`MAX_INTENT_CHARS`; the sentence starts with "intent".
    """
    if intent is None:
        return None
    if not isinstance(intent, str):
        raise ValueError("intent must be a string")
    intent = check_no_nul(check_unicode(intent, "intent"), "intent").strip()
    check_no_control(intent, "intent")
    if len(intent) > MAX_INTENT_CHARS or "\n" in intent or "\r" in intent:
        raise ValueError(
            f"intent must be one line of at most {MAX_INTENT_CHARS} characters, "
            f"got {intent[:40]!r}{'…' if len(intent) > 40 else ''}"
        )
    return intent or None


def check_rating(rating, correction) -> None:
    """Refuse a rating that is not ``up``/``down``, a correction :func:`check_correction`
    refuses, or a correction with a thumbs-up (which approves the answer as sent).

    Raises:
        ValueError: naming the field (the sentence starts with "rating" or "correction").
    """
    if rating not in RATINGS:
        raise ValueError(f"rating must be 'up' or 'down', got {str(rating)[:40]!r}")
    check_correction(correction)
    if rating == "up" and correction and correction.strip():
        raise ValueError(
            "correction goes with a thumbs-down: a thumbs-up approves the answer as sent; "
            "vote down to give a better answer"
        )


def check_correction(correction) -> None:
    """Refuse a correction that is not short, valid text (None: no correction, allowed).

    Raises:
        ValueError: not text, not valid Unicode (a lone surrogate, which the store cannot keep),
            holding a NUL or a control token's spelling (:func:`check_no_control`), or longer
            than :data:`MAX_CORRECTION_CHARS`; the sentence starts with "correction".
    """
    if correction is None:
        return
    if not isinstance(correction, str):
        raise ValueError("correction must be a string")
    check_no_nul(check_unicode(correction, "correction"), "correction")
    check_no_control(correction, "correction")
    if len(correction) > MAX_CORRECTION_CHARS:
        raise ValueError(
            f"correction is {len(correction)} characters; at most {MAX_CORRECTION_CHARS}"
        )


def check_no_nul(text: str, what: str) -> str:
    """``text``, refused when it holds a NUL: PostgreSQL's text columns cannot keep one.

    Raises:
        ValueError: the sentence starts with ``what``.
    """
    if "\x00" in text:
        raise ValueError(
            f"{what} contains a NUL character (U+0000, at character {text.index(chr(0)) + 1:,}), "
            "which the store cannot keep; remove it"
        )
    return text


def control_spelling(text) -> str | None:
    """The first chat-template control-token spelling in ``text`` (``<|im_start|>`` ...), or
    None (also for what is not text)."""
    # exported as training data for whatever base model trains next: no one tokenizer decides
    found = COMMON_CONTROL.search(text) if isinstance(text, str) else None
    return found.group() if found else None


def check_no_control(text: str, what: str) -> str:
    """``text``, refused when it spells a chat template's control token: exported as training
    data, it would be learnt as the markers the model's own turns are made of.

    Raises:
        ValueError: the sentence starts with ``what`` and names the spelling.
    """
    found = control_spelling(text)
    if found is not None:
        raise ValueError(
            f"{what} spells a control token of a chat template ({found!r}), which must not "
            "reach training data; remove it"
        )
    return text


def content_text(content) -> str:
    """A message's text, whether a string or a list of content parts (OpenAI's, Gradio's)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
