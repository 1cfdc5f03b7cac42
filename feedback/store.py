"""The feedback store: served answers and the ratings given to them, as JSON lines.

Two files under ``$TUNEDESK_HOME/feedback/``:

- ``answers.jsonl``: one line per served answer *when conversation logging is on*
  (``--log-conversations``; off by default): its id, the adapter and version (weights hash)
  and engine that answered, the conversation and the answer, redacted with the helpdesk
  import's redaction (``finetune/data/redact.py``).
- ``ratings.jsonl``: one line per rating: ``up`` or ``down``, an optional corrected answer
  (redacted), the answer's adapter and version, the conversation when it was logged, and an
  optional ``intent`` label (the caller's, or the reviewer's). Each starts ``new`` for the
  review queue. Compare's verdicts land here too (``feedback/compare.py``).

Every answer is remembered in memory (the last :data:`REMEMBERED`, without its text when
logging is off), so a rating names its adapter version even when nothing was logged; after a
restart, only logged answers can be rated. Nothing leaves the home folder.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core import paths
from core.paths import append_line, read_json_lines
from finetune.data.redact import redact

ANSWERS_FILE, RATINGS_FILE = "answers.jsonl", "ratings.jsonl"
RATINGS = ("up", "down")
MAX_CORRECTION_CHARS = 8000
MAX_INTENT_CHARS = 80
REMEMBERED = 10_000
RATINGS_LOCK = threading.Lock()  # appends and the review queue's rewrites of ratings.jsonl, in turn


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
    """Served answers and their ratings, in one home folder.

    Args:
        folder: where the files go (default ``$TUNEDESK_HOME/feedback``).
        log_conversations: keep each answer's conversation and text (redacted).
    """

    def __init__(self, folder: Path | None = None, log_conversations: bool = False):
        self.folder = Path(folder) if folder else paths.subdir("feedback")
        self.log_conversations = log_conversations
        self._recent: OrderedDict[str, ServedAnswer] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, answer_id: str, adapter: str, version: str, engine: str, messages: list[dict],
               text: str, source: str = "api", grounding: dict | None = None) -> ServedAnswer:
        """Remember one served answer (and log it, redacted, when logging is on); ``grounding``:
        the knowledge version and passage ids it was shown (``knowledge.grounding``), kept with
        it and with its ratings."""
        served = ServedAnswer(answer_id, adapter, version, engine, source, _now(),
                              extra={"grounding": grounding} if grounding else {})
        if self.log_conversations:
            served.messages, served.answer = redacted(messages, text)
            append_line(self.folder / ANSWERS_FILE, json.dumps(asdict(served), ensure_ascii=False))
        with self._lock:
            self._recent[answer_id] = served
            while len(self._recent) > REMEMBERED:
                self._recent.popitem(last=False)
        return served

    def answer(self, answer_id: str) -> ServedAnswer | None:
        """A served answer by id: remembered, or logged before (None if neither)."""
        with self._lock:
            found = self._recent.get(answer_id)
        if found is not None:
            return found
        for row in read_json_lines(self.folder / ANSWERS_FILE):
            if row.get("id") == answer_id:
                return ServedAnswer(**{k: row.get(k) for k in ServedAnswer.__dataclass_fields__ if k in row})
        return None

    def rate(self, answer_id: str, rating: str, correction: str | None = None, source: str = "api",
             intent: str | None = None) -> dict:
        """Store a rating (and a corrected answer) for a served answer; returns the stored row.

        Raises:
            KeyError: no answer with this id was served (or logged) here.
            ValueError: the rating is not up or down, the correction is not text or too long, or
                the intent is not a short line of text.
        """
        check_rating(rating, correction)
        intent = check_intent(intent)
        served = self.answer(answer_id)
        if served is None:
            raise KeyError(answer_id)
        row = rating_row(served, rating, correction, source, intent)
        self.add(row)
        return row

    def add(self, *rows: dict) -> None:
        """Append rating rows (from :func:`rating_row`) whole, all of them or none."""
        lines = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)
        with RATINGS_LOCK:
            append_line(self.folder / RATINGS_FILE, lines)

    def ratings(self) -> list[dict]:
        """Every stored rating, oldest first (a torn or foreign line is skipped)."""
        return [r for r in read_json_lines(self.folder / RATINGS_FILE) if r.get("rating") in RATINGS]


def rating_row(served: ServedAnswer, rating: str, correction: str | None, source: str,
               intent: str | None = None, **extra) -> dict:
    """A new rating of ``served`` as stored (``new``, its correction redacted); checked by the caller."""
    return {"id": f"fb-{uuid.uuid4().hex[:16]}", "answer_id": served.id, "created": _now(),
            "rating": rating, "correction": redact(correction.strip()) if correction and correction.strip() else None,
            "adapter": served.adapter, "version": served.version, "engine": served.engine,
            "source": source, "messages": served.messages, "answer": served.answer, "status": "new",
            "intent": intent, **_grounding(served), **extra}


def _grounding(served: ServedAnswer) -> dict:
    """The knowledge an answer was shown, for its rating row (none when it was not grounded)."""
    grounding = (served.extra or {}).get("grounding")
    return {"grounding": grounding} if grounding else {}


def redacted(messages: list[dict], text: str) -> tuple[list[dict], str]:
    """(the conversation, the answer) as kept: plain text, personal data replaced."""
    return ([{"role": m.get("role"), "content": redact(content_text(m.get("content")))} for m in messages],
            redact(text))


def check_intent(intent) -> str | None:
    """An intent label as stored: stripped text, None when empty or absent.

    Raises:
        ValueError: not text, more than one line or longer than :data:`MAX_INTENT_CHARS`.
    """
    if intent is None:
        return None
    if not isinstance(intent, str):
        raise ValueError("intent must be a string")
    intent = intent.strip()
    if len(intent) > MAX_INTENT_CHARS or "\n" in intent or "\r" in intent:
        raise ValueError(f"intent must be one line of at most {MAX_INTENT_CHARS} characters, "
                         f"got {intent[:40]!r}{'…' if len(intent) > 40 else ''}")
    return intent or None


def check_rating(rating, correction) -> None:
    """Refuse a rating that is not ``up``/``down`` or a correction that is not short text.

    Raises:
        ValueError: naming the field.
    """
    if rating not in RATINGS:
        raise ValueError(f"rating must be 'up' or 'down', got {str(rating)[:40]!r}")
    if correction is not None and not isinstance(correction, str):
        raise ValueError("correction must be a string")
    if correction is not None and len(correction) > MAX_CORRECTION_CHARS:
        raise ValueError(f"correction is {len(correction)} characters; at most {MAX_CORRECTION_CHARS}")


def content_text(content) -> str:
    """A message's text, whether a string or a list of content parts (OpenAI's, Gradio's)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
