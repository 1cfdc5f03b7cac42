"""Compare's verdicts as ratings in the review queue.

A verdict on Compare's panes ("this answer is better", or "it should have said this") becomes
one thumbs-down per pane that lost: that pane's adapter, version and answer, the customer's
message as the conversation, and as its correction the preferred pane's answer or the one the
user wrote. Reviewed and accepted like any rating, each exports as a preference pair (chosen =
the preferred pane or the written answer, rejected = the pane that lost) and an SFT row. The
rows of one verdict share a ``verdict`` id; ``preferred`` names the winning pane (None when
the user wrote the answer).

A pane's answer id comes from what was asked and what the pane answered, so a rater (the
page's session) giving a new verdict on the same panes replaces their earlier one: one vote
per answer.

Rating in Compare is asking to keep the conversation, as in Chat: it is stored redacted.
"""

from __future__ import annotations

import hashlib
import json
import uuid

from feedback.store import (
    FeedbackStore,
    ServedAnswer,
    check_intent,
    check_rating,
    rating_row,
    redacted,
)


def rate_compare(
    store: FeedbackStore,
    messages: list[dict],
    panes: list[dict],
    preferred: str | None,
    correction: str = "",
    intent: str | None = None,
    rater: str | None = None,
) -> list[dict]:
    """Store a Compare verdict as thumbs-down ratings of the panes that lost; returns the rows.

    Args:
        messages: the conversation every pane answered.
        panes: ``[{"adapter": label, "adapter_hash": version, "text": answer, "engine": what
            decoded it (optional), "grounding": the knowledge version and passage ids it was
            shown (optional)}, ...]`` as shown.
        preferred: the label of the better pane; ignored when ``correction`` is written.
        correction: the answer it should have given (wins over ``preferred``).
        intent: an optional intent label for the conversation.
        rater: who gives the verdict (the page's session); None: nobody to replace.

    Raises:
        ValueError: no panes, a preferred label that is not a pane, a correction that is too
            long or an intent that is not one short line.
    """
    correction = (correction or "").strip()
    check_rating("down", correction or None)
    intent = check_intent(intent)
    by_label = {p["adapter"]: p for p in panes}
    if not panes or (not correction and preferred not in by_label):
        raise ValueError("pick the better answer or write a corrected one")
    chosen = correction or by_label[preferred]["text"]
    winner = None if correction else preferred
    verdict = f"cmp-{uuid.uuid4().hex[:12]}"
    rows = []
    for pane in panes:
        if pane["adapter"] == winner or pane["text"].strip() == chosen:
            continue  # the winner, or a pane that said the same: no pair to learn from
        kept, answer = redacted(messages, pane["text"])
        shown = json.dumps([messages, pane["adapter"], pane.get("adapter_hash", ""), pane["text"]])
        answer_id = "compare-" + hashlib.sha256(shown.encode("utf-8")).hexdigest()[:24]
        served = ServedAnswer(
            answer_id,
            pane["adapter"],
            pane.get("adapter_hash", ""),
            pane.get("engine", ""),
            "compare",
            "",
            kept,
            answer,
            extra={"grounding": pane["grounding"]} if pane.get("grounding") else {},
        )
        rows.append(
            rating_row(
                served,
                "down",
                chosen,
                "compare",
                intent,
                preferred=winner,
                verdict=verdict,
                rater=rater,
            )
        )
    return store.add(*rows) if rows else []
