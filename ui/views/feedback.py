"""Feedback from the Compare tab, saved as a dataset the Train tab accepts. No gradio here.

Each choice appends one JSON line to ``feedback/feedback.jsonl`` with ``instruction`` and
``response`` (the preferred or corrected answer) — the same columns as the demo data — plus
``rejected`` answers and where they came from, for preference training later.
"""

from __future__ import annotations

import json
import time

from core import paths
from core.paths import append_line

FEEDBACK_FILE = "feedback.jsonl"


def save_feedback(prompt: str, answers: list[dict], choice: str | None, correction: str = "") -> dict:
    """Record which answer was better, or a corrected answer.

    Args:
        prompt: the user's question.
        answers: [{"adapter": label, "adapter_hash": ..., "text": ...}, ...] as shown.
        choice: the label of the preferred answer, or None when ``correction`` is given.
        correction: a better answer written by the user (wins over ``choice``).

    Raises:
        ValueError: nothing to save, or the choice is not one of the answers.
    """
    if not prompt or not answers:
        raise ValueError("compare some answers first")
    correction = (correction or "").strip()
    by_label = {a["adapter"]: a for a in answers}
    if not correction and choice not in by_label:
        raise ValueError("pick the better answer or write a corrected one")
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
        raise OSError(f"could not save the feedback to {path}: {err.strerror or err}; "
                      "the rows saved before are unchanged") from err
    return row


def feedback_path() -> str:
    return str(paths.subdir("feedback") / FEEDBACK_FILE)


def feedback_count() -> int:
    path = paths.subdir("feedback") / FEEDBACK_FILE
    return sum(1 for _ in open(path, encoding="utf-8")) if path.exists() else 0
