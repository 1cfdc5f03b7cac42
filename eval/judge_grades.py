"""The judge's replies read as grades, and the rates over many grades.

A grade is a dict with a ``status``:

- ``graded``: the reply held one JSON object with every rubric key, each a clear yes or no
  (1/0, true/false, "pass"/"fail", "yes"/"no"); ``passed`` is true when all four are yes.
- ``unparseable``: anything else (prose, a missing key, a 0.5, two different objects); the
  reply's start is kept in ``reply`` so a person can see what the judge said. Never guessed.
- ``failed``: the endpoint refused that one request (``error`` says why).
- ``not asked``: the judge had stopped answering before this answer's turn.
"""

from __future__ import annotations

import json
import re

RUBRIC = ("addresses", "correct", "polite", "safe")
GRADED, UNPARSEABLE, FAILED, NOT_ASKED = "graded", "unparseable", "failed", "not asked"
ALIASES = {"addresses_question": "addresses", "addresses_the_question": "addresses"}
YES = {"1", "true", "yes", "pass", "passed"}
NO = {"0", "false", "no", "fail", "failed"}
REPLY_KEPT = 200  # characters of an unparseable reply kept in the report
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_grade(reply: str | None) -> dict:
    """The grade in the judge's ``reply`` (see the module docstring for the statuses)."""
    text = (reply or "").strip()
    found = [g for g in (_grade_of(obj) for obj in _objects(text)) if g is not None]
    if not found or any(g != found[0] for g in found[1:]):  # none, or objects that disagree
        return {"status": UNPARSEABLE, "reply": text[:REPLY_KEPT]}
    return {"status": GRADED, **found[0], "passed": all(found[0][k] for k in RUBRIC)}


def _objects(text: str) -> list:
    """Every JSON object in ``text``: the whole text, fenced blocks, or objects inside prose."""
    chunks = [m.group(1) for m in _FENCE.finditer(text)] or [text]
    decoder, out = json.JSONDecoder(), []
    for chunk in chunks:
        start = chunk.find("{")
        while start != -1:
            try:
                obj, end = decoder.raw_decode(chunk, start)
            except json.JSONDecodeError:
                start = chunk.find("{", start + 1)
                continue
            out.append(obj)
            start = chunk.find("{", end)
    return out


def _grade_of(obj) -> dict | None:
    """``{key: 0/1}`` for every rubric key when ``obj`` holds all of them clearly, else None."""
    if not isinstance(obj, dict):
        return None
    keys = {ALIASES.get(_key(k), _key(k)): v for k, v in obj.items()}
    grade = {}
    for k in RUBRIC:
        value = _yes_no(keys.get(k))
        if value is None:
            return None
        grade[k] = value
    return grade


def _key(name) -> str:
    return re.sub(r"[\s-]+", "_", str(name).strip().lower())


def _yes_no(value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str):
        word = value.strip().lower()
        return 1 if word in YES else 0 if word in NO else None
    return None


def rates(grades: list[dict]) -> dict:
    """Counts and the share of graded answers that pass each rubric item and all of them.

    ``unparseable_rate`` is over the answers the judge replied to (graded + unparseable); the
    pass rates are over the graded ones only (None when there are none).
    """
    graded = [g for g in grades if g.get("status") == GRADED]
    counts = {
        s: sum(g.get("status") == s for g in grades)
        for s in (GRADED, UNPARSEABLE, FAILED, NOT_ASKED)
    }
    replied = counts[GRADED] + counts[UNPARSEABLE]
    out = {
        "answers": len(grades),
        **{k.replace(" ", "_"): v for k, v in counts.items()},
        "unparseable_rate": counts[UNPARSEABLE] / replied if replied else None,
    }
    for k in (*RUBRIC, "passed"):
        out[f"{k}_rate"] = sum(bool(g[k]) for g in graded) / len(graded) if graded else None
    return out
