"""Feedback from the Compare and Chat tabs. No gradio here.

Compare: each choice appends one JSON line to ``feedback/feedback.jsonl`` with ``instruction``
and ``response`` (the preferred or corrected answer) — the same columns as the demo data — plus
``rejected`` answers and where they came from; and it joins the review queue as a thumbs-down
of each pane that lost (``feedback/compare.py``), whose accepted rows export as preference pairs.

Chat: a thumbs up or down on an answer (and a corrected answer) goes to the feedback store
(``feedback/store.py``) with the conversation that led to it, redacted, and the adapter version
that answered, as ratings from the API do.
"""

from __future__ import annotations

import json
import time

from core import paths
from core.paths import append_line
from feedback.compare import rate_compare
from feedback.store import FeedbackStore, check_rating, content_text

FEEDBACK_FILE = "feedback.jsonl"


def save_feedback(
    prompt: str,
    answers: list[dict],
    choice: str | None,
    correction: str = "",
    rater: str | None = None,
) -> tuple[dict, list[dict]]:
    """Record which answer was better, or a corrected answer: a row of ``feedback.jsonl`` and
    the review queue's ratings of the panes that lost.

    Args:
        prompt: the user's question.
        answers: [{"adapter": label, "adapter_hash": ..., "text": ..., "engine": ...}, ...] as
            shown (``engine``, what decoded it, is optional).
        choice: the label of the preferred answer, or None when ``correction`` is given.
        correction: a better answer written by the user (wins over ``choice``).
        rater: the page's session (a new verdict on the same panes replaces its earlier one).

    Returns:
        (the ``feedback.jsonl`` row, the ratings added to the review queue).

    Raises:
        ValueError: nothing to save, the choice is not one of the answers, or the correction
            is too long. OSError: a file could not be written (which, in the message).
    """
    if not prompt or not answers:
        raise ValueError("compare some answers first")
    correction = (correction or "").strip()
    by_label = {a["adapter"]: a for a in answers}
    if not correction and choice not in by_label:
        raise ValueError("pick the better answer or write a corrected one")
    check_rating("down", correction or None)  # before anything is written
    chosen = correction or by_label[choice]["text"]
    row = {
        "instruction": prompt,
        "response": chosen,
        "intent": "feedback",
        "source": "correction" if correction else f"preferred:{choice}",
        "rejected": [a["text"] for a in answers if correction or a["adapter"] != choice],
        "models": {a["adapter"]: a.get("adapter_hash", "") for a in answers},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    path = paths.subdir("feedback") / FEEDBACK_FILE
    try:
        append_line(path, json.dumps(row, ensure_ascii=False))
    except OSError as err:
        raise OSError(
            f"could not save the feedback to {path}: {err.strerror or err}; "
            "the rows saved before are unchanged"
        ) from err
    store = (
        FeedbackStore()
    )  # the verdict keeps its conversation (redacted), as a rating in Chat does
    try:
        asked = [{"role": "user", "content": prompt}]
        rated = rate_compare(store, asked, answers, choice, correction, rater=rater)
    except OSError as err:
        raise OSError(
            f"saved to {path}, but could not add it to the review queue in "
            f"{store.store}: "
            f"{err.strerror or err}"
        ) from err
    return row, rated


def engine_of(how: str) -> str:
    """The engine's label in Compare's line ("2 answers decoded together on <label> in 1.2 s")."""
    label = how.partition(" on ")[2].rpartition(" in ")[0]
    return label or how


def feedback_path() -> str:
    return str(paths.subdir("feedback") / FEEDBACK_FILE)


def feedback_count() -> int:
    path = paths.subdir("feedback") / FEEDBACK_FILE
    return sum(1 for _ in open(path, encoding="utf-8")) if path.exists() else 0


def rate_chat_answer(
    history: list[dict],
    index: int,
    rating: str,
    adapter: str | None,
    version: str,
    engine: str,
    correction: str | None = None,
    system: str | None = None,
    rater: str | None = None,
    grounding: dict | None = None,
) -> dict:
    """Store a rating of the Chat answer at ``history[index]`` (with the turns before it, after
    the system prompt ``system`` it was asked under: training on it then asks as Chat did).
    The answer's id comes from what was asked and answered, so ``rater`` (the page's session)
    rating it again replaces their rating. ``grounding``: the knowledge version and passages
    the answer was shown (:meth:`knowledge.grounding.Grounding.record`), kept with it.

    Raises:
        ValueError: no answer at that place, a bad rating or correction.
    """
    if not 0 <= index < len(history) or history[index].get("role") != "assistant":
        raise ValueError("rate one of the assistant's answers")
    check_rating(rating, correction)
    import hashlib

    store = FeedbackStore(log_conversations=True)  # rating in Chat is asking to keep it
    before = [
        {"role": m["role"], "content": content_text(m.get("content"))} for m in history[:index]
    ]
    if system and system.strip() and not any(m["role"] == "system" for m in before):
        before.insert(0, {"role": "system", "content": system})
    asked = json.dumps([adapter, version, before, content_text(history[index].get("content"))])
    answer_id = "chat-" + hashlib.sha256(asked.encode("utf-8")).hexdigest()[:24]
    store.record(
        answer_id,
        adapter or "base",
        version,
        engine,
        before,
        content_text(history[index].get("content")),
        source="chat",
        grounding=grounding,
    )
    return store.rate(answer_id, rating, correction, source="chat", rater=rater)
