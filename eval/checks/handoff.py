"""Hand-offs: which rows ask for a person, and which answers hand the customer over to one.

A row asks for a person when its intent does: by default every intent whose name holds one of
``PERSON_WORDS`` (``contact_human_agent`` in Bitext), or the list set in the adapter's gate.json
(``handoff_intents``). An answer hands off when it says so in one of the ways a support bot
does (``HANDOFF_PATTERNS``: "connect you with", "transfer you to", "a live agent", "speak with a
representative", "an operator", ...), or when it holds one of gate.json's ``handoff_phrases``
(plain phrases, any case), which then replace the built-in patterns.

Measured on the Bitext training CSV's reference answers: 134 of 142 ``contact_human_agent``
answers are recognised (94 %; the others only say "our support team is available"), and 8 of
the 3,858 other answers (all ``contact_customer_service``) read as hand-offs.
"""

from __future__ import annotations

import re

PERSON_WORDS = ("human", "agent", "representative", "person", "operator")
_WHO = r"(?:person|human|agent|representative|operator|assistant|specialist|someone|somebody)"
HANDOFF_PATTERNS = (
    # "connect you with", "transfer your call to", "put you through to"
    r"\b(?:connect|transfer|put|pass|hand|route|escalate|forward)(?:ed|ing|s)? (?:you|your "
    r"(?:call|chat|"
    r"request|case))(?: (?:through|over|directly))? (?:to|with)\b",
    # "a live agent", "a human representative", "a real person"
    r"\b(?:human|live|real)(?: support| service| customer service)? " + _WHO,
    # "speak with a ...", "talk to one of our ...", "get in touch with someone"
    # (not "in a few minutes")
    r"\b(?:speak|talk|chat|connect|get in touch)(?:ing)? (?:directly )?(?:with|to) (?:a|an|one "
    r"of our|someone|"
    r"somebody|a live|a real)\b(?! (?:few|moment|second|minute)\b)",
    r"\b(?:operator|human|real person)s?\b",
)


def handoff_intents(labels, configured: list[str] | None = None) -> list[str]:
    """The intents that ask for a person: ``configured`` when set, else the labels whose name
    holds a word of ``PERSON_WORDS`` (split at ``_``, ``-`` and spaces)."""
    if configured is not None:
        return sorted(set(configured))
    found = set()
    for label in {str(x) for x in labels if x is not None}:
        words = set(re.split(r"[_\-\s]+", label.lower()))
        if words & set(PERSON_WORDS):
            found.add(label)
    return sorted(found)


def detector(phrases: list[str] | None = None):
    """A compiled pattern that finds a hand-off: the built-in patterns, or ``phrases`` instead."""
    if phrases:
        return re.compile("|".join(re.escape(p.strip()) for p in phrases if p.strip()), re.I)
    return re.compile("|".join(f"(?:{p})" for p in HANDOFF_PATTERNS), re.I)


def hands_off(text: str, pattern) -> str:
    """The words that make ``text`` a hand-off ("" when it is not one)."""
    found = pattern.search(text or "")
    return found.group() if found else ""


def handoff_rates(asked: list, answers: list[str], due: list[str], pattern) -> dict:
    """Both rates: hand-off requests handed off, and hand-offs nobody asked for.

    Args:
        asked: each row's label (None: unlabelled; its answer counts on neither side).
        answers: each row's answer.
        due: the intents that ask for a person.
        pattern: from :func:`detector`.

    Returns:
        ``{"due": rows asking, "given": of those handed off, "rate": given/due (None: no row asks),
        "unasked_rows", "unasked": hand-offs among them, "unasked_rate",
        "per_row": [phrase or ""]}``.
    """
    per_row = [hands_off(a, pattern) for a in answers]
    want = set(due)
    asking = [i for i, label in enumerate(asked) if label is not None and str(label) in want]
    others = [i for i, label in enumerate(asked) if label is not None and str(label) not in want]
    given = sum(bool(per_row[i]) for i in asking)
    unasked = sum(bool(per_row[i]) for i in others)
    return {
        "due": len(asking),
        "given": given,
        "rate": given / len(asking) if asking else None,
        "unasked_rows": len(others),
        "unasked": unasked,
        "unasked_rate": unasked / len(others) if others else None,
        "per_row": per_row,
    }
