"""How far the judge agrees with people: its grades beside the review queue's human ratings.

People rate answers with a thumbs-up or -down (Chat, Compare, ``POST /v1/feedback``; stored by
:mod:`feedback.store`). A rating is matched to a judged answer when both are the same question
(the customer's last message) and the same answer text, compared as the store keeps them:
redacted (``core.redact``) and with runs of whitespace made one space. Ratings the
review queue dropped are left out (a reviewer judged them unusable); an answer rated several
times takes the majority, and a tie leaves it out.

The judge agrees with a person when its overall verdict (every rubric item passed) matches
the thumbs: up = passed. :func:`agreement` gives the count, the raw agreement and Cohen's
kappa (scikit-learn's ``cohen_kappa_score``: agreement beyond what the two raters' own rates
would give by chance; 1 is perfect, 0 is chance).
"""

from __future__ import annotations

import warnings
from collections import Counter

from core.redact import redact

DROPPED = "dropped"


def match_key(question: str, answer: str) -> tuple[str, str]:
    """What makes two answers "the same": redacted text, whitespace runs made one space."""
    return " ".join(redact(question or "").split()), " ".join(redact(answer or "").split())


def last_question(messages) -> str | None:
    """The customer's last message in a stored conversation (None when there is none)."""
    for m in reversed(messages or []):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return None


def human_labels(ratings: list[dict]) -> tuple[dict, dict]:
    """``({match_key: 1 up / 0 down}, counts)`` from stored rating rows.

    ``counts`` says how many ratings were usable, left out as dropped, kept no conversation or
    answer (the API ran without ``--log-conversations``), or were tied.
    """
    votes: dict[tuple, Counter] = {}
    counts = Counter()
    for row in ratings:
        question, answer = last_question(row.get("messages")), row.get("answer")
        if row.get("status") == DROPPED:
            counts["dropped"] += 1
        elif row.get("rating") not in ("up", "down"):
            counts["unknown"] += 1
        elif not question or not isinstance(answer, str):
            counts["no_text"] += 1
        else:
            counts["used"] += 1
            votes.setdefault(match_key(question, answer), Counter())[row["rating"] == "up"] += 1
    labels = {}
    for key, vote in votes.items():
        if vote[True] == vote[False]:
            counts["tied"] += 1
        else:
            labels[key] = int(vote[True] > vote[False])
    return labels, dict(counts)


def review_items(ratings: list[dict], limit: int, skip: set | None = None) -> list[dict]:
    """Up to ``limit`` human-rated answers to grade, newest first, one per question and answer.

    Returns:
        ``[{"question", "answer", "human", "key"}]``; answers in ``skip`` (keys) are left out.
    """
    labels, _ = human_labels(ratings)
    items, seen = [], set(skip or ())
    for row in reversed(ratings):
        question = last_question(row.get("messages"))
        if len(items) >= limit or not question or not isinstance(row.get("answer"), str):
            continue
        key = match_key(question, row["answer"])
        if key in labels and key not in seen:
            seen.add(key)
            items.append(
                {"question": question, "answer": row["answer"], "human": labels[key], "key": key}
            )
    return items


def agreement(human: list[int], judge: list[int]) -> dict:
    """``{"n", "agree", "raw", "kappa", "both_pass", "human_only", "judge_only", "both_fail"}``.

    ``kappa`` is None when it is undefined (no pairs, or both raters gave one label to every
    answer); ``kappa_note`` then says why.
    """
    if len(human) != len(judge):
        raise ValueError(f"{len(human)} human ratings but {len(judge)} judge grades")
    pairs = list(zip(human, judge, strict=True))
    cells = {"both_pass": (1, 1), "human_only": (1, 0), "judge_only": (0, 1), "both_fail": (0, 0)}
    out = {
        "n": len(pairs),
        "agree": sum(h == j for h, j in pairs),
        **{name: pairs.count(cell) for name, cell in cells.items()},
    }
    out["raw"] = out["agree"] / len(pairs) if pairs else None
    out["kappa"], out["kappa_note"] = _kappa(human, judge)
    return out


def _kappa(human: list[int], judge: list[int]) -> tuple[float | None, str]:
    if not human:
        return None, "no answer was rated by both a person and the judge"
    if len(set(human) | set(judge)) < 2:
        return None, "undefined: the person and the judge gave every answer the same verdict"
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = float(cohen_kappa_score(human, judge))
    if value != value:  # NaN: chance agreement is 1 (one rater used one label only)
        return None, "undefined: one of them gave every answer the same verdict"
    return value, ""
