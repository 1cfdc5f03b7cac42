"""Replace personal data in helpdesk messages with placeholders, counting each kind.

What is caught, in this order (an earlier kind's placeholder is never matched again):

- ``[CARD]``: 13-19 digits, optionally in groups split by single spaces or dashes, that pass
  the Luhn check. A 16-digit number failing Luhn is left as it is (it is not a card number,
  though it may still be an account number). "ending in 4242" (last four digits) is kept.
- ``[EMAIL]``: ``local@domain.tld`` addresses.
- ``[ORDER]``: the number after "order" / "order number" / "order no." / "order id" /
  "order #" / "order:" (letters and digits, at least 4 characters, one digit or more, not a
  date), and ``ORD-...`` / ``ORD...`` / ``ORDER-...`` ids (in capitals) anywhere. The keyword
  stays: "order [ORDER]".
- ``[PHONE]``: ``+`` then 8-15 digits (spaces, dashes, dots or parentheses between groups);
  local numbers of 9-15 digits in groups ("(555) 123-4567", "020 7946 0958", "555.123.4567");
  "555-1234"; a bare run of 10-13 digits that starts with 0. Dates (2024-05-01, 01/05/2024),
  times, prices ("$1,299.00"), IP addresses and bare numbers not starting with 0 are not
  phones. A bare 9-digit number is left alone.
- ``[AGENT]`` / ``[CUSTOMER]``: the names the export gives as authors (agent rows and customer
  rows), as whole words: the full name and each part of three letters or more ("Sarah Jones"
  also hides "Sarah" and "Jones"). Parts match with the export's capitalisation, so an agent
  named "Will" also hides the word "Will" at the start of a sentence, not "will".

What is NOT caught: names that are not an author in the export (a customer's name typed only
in the text, a colleague's, a courier's); postal addresses and postcodes; IBANs and bank
account numbers; ticket, tracking and invoice numbers without the word "order"; "#12345"
alone; card numbers split other than by spaces or dashes, or written out in words; dates of
birth; URLs (a URL with an e-mail inside loses only the e-mail); personal data inside
attachments or HTML markup. Review a sample of the import before training on it.
"""

from __future__ import annotations

import re
from collections import Counter

KINDS = ("card", "email", "order", "phone", "agent", "customer")

_CARD = re.compile(r"(?<![\w+-])\d(?:[ -]?\d){12,18}(?![\w-])")
# The lookbehind starts a match only where a run of address characters starts: without it a
# long run without "@" is rescanned from every position (quadratic: minutes for a 1 MB message).
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_ORDER_WORD = re.compile(
    r"(?i)\b(order(?:\s*(?:number|num|no\.?|id|ref(?:erence)?))?\s*(?:[:#]|is)?\s*)"
    r"#?(?=[A-Z0-9-]*\d)([A-Z0-9][A-Z0-9-]{3,})\b"
)
_ORDER_ID = re.compile(r"\b(?:ORD|ORDER)[-_]?\d[A-Z0-9-]*\b")  # capitals: "ord" is a word
_PHONE = re.compile(
    r"(?<![\w.,/:$€£+-])"
    r"(\+\d[\d .()-]{6,20}\d"  # international
    r"|\(\d{2,5}\)[ .-]?\d[\d .-]{4,14}\d"  # (555) 123-4567, (020) 7946 0958
    r"|\d{2,5}(?:[ -]\d{2,6}){1,4}"  # groups split by spaces or dashes
    r"|\d{3}\.\d{3}\.\d{4}"  # 555.123.4567
    r"|0\d{9,12})"  # bare national number
    r"(?![\w/:%-]|[.,]\d)"
)
# Words in author names like "ACME Support Team" that are not a person's name.
_NOT_NAMES = {
    "support",
    "team",
    "agent",
    "bot",
    "customer",
    "service",
    "help",
    "desk",
    "admin",
    "system",
    "the",
    "and",
    "sales",
    "billing",
    "care",
}
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$|^\d{1,2}[-.]\d{1,2}[-.]\d{2,4}$")


def redact(text: str, agents: dict[str, str] | None = None, counts: Counter | None = None) -> str:
    """``text`` with cards, e-mails, orders, phones and the given names replaced.

    Args:
        text: one message.
        agents: ``{name: placeholder}`` patterns from :func:`name_patterns`, or None.
        counts: a Counter to add ``{kind: replacements}`` to.
    """
    counts = counts if counts is not None else Counter()
    text = _sub(_CARD, text, lambda m: "[CARD]" if _luhn(m.group()) else None, "card", counts)
    text = _sub(_EMAIL, text, lambda m: "[EMAIL]", "email", counts)
    text = _sub(_ORDER_WORD, text, _order, "order", counts)
    text = _sub(_ORDER_ID, text, lambda m: "[ORDER]", "order", counts)
    text = _sub(_PHONE, text, _phone, "phone", counts)
    for pattern, placeholder in (agents or {}).items():
        kind = placeholder.strip("[]").lower()
        text = _sub(pattern, text, lambda m, p=placeholder: p, kind, counts)
    return text


def find(text: str) -> list[tuple[str, str]]:
    """The personal data :func:`redact` would replace in ``text`` (authors' names aside), as
    ``(kind, span)`` in the order the detectors run; an earlier kind's span is never found again
    as a later kind (a card number is not also a phone). Evaluation uses it to spot leaks."""
    found: list[tuple[str, str]] = []

    def recording(kind: str, rule, span=lambda m: m.group()):
        def one(m):
            new = rule(m)
            if new is not None:
                found.append((kind, span(m)))
            return new

        return one

    counts: Counter = Counter()
    text = _sub(
        _CARD,
        text,
        recording("card", lambda m: "[CARD]" if _luhn(m.group()) else None),
        "card",
        counts,
    )
    text = _sub(_EMAIL, text, recording("email", lambda m: "[EMAIL]"), "email", counts)
    text = _sub(
        _ORDER_WORD, text, recording("order", _order, lambda m: m.group(2)), "order", counts
    )
    text = _sub(_ORDER_ID, text, recording("order", lambda m: "[ORDER]"), "order", counts)
    _sub(_PHONE, text, recording("phone", _phone), "phone", counts)
    return found


def name_patterns(agent_names, customer_names=()) -> dict:
    """``{compiled pattern: placeholder}`` hiding the given author names (longest first).

    A name shared by an agent and a customer is called an agent. Parts shorter than three
    letters ("J.", "Li") are not matched alone: too many ordinary words would go.
    """
    words: dict[str, str] = {}
    for names, placeholder in ((customer_names, "[CUSTOMER]"), (agent_names, "[AGENT]")):
        for name in names:
            name = " ".join(str(name).split())
            if len(name) < 3 or "@" in name:  # an e-mail as the "name": the e-mail rule hides it
                continue
            words[name] = placeholder
            for part in re.findall(r"[^\W\d_][\w'-]*", name):
                if len(part) >= 3 and part.lower() not in _NOT_NAMES:
                    words[part] = placeholder
    ordered = sorted(words, key=len, reverse=True)
    return {re.compile(rf"(?<![\w@]){re.escape(w)}(?![\w@])"): words[w] for w in ordered}


def _sub(pattern, text: str, replace, kind: str, counts: Counter) -> str:
    def one(m):
        new = replace(m)
        if new is None:
            return m.group()
        counts[kind] += 1
        return new

    return pattern.sub(one, text)


def _luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _order(m) -> str | None:
    if _DATE.match(m.group(2)):
        return None
    return f"{m.group(1).rstrip('#').rstrip()} [ORDER]".lstrip() if m.group(1) else "[ORDER]"


def _phone(m) -> str | None:
    text = m.group()
    digits = sum(c.isdigit() for c in text)
    if _DATE.match(text):
        return None
    if text.startswith("+"):
        return "[PHONE]" if 8 <= digits <= 15 else None
    if re.fullmatch(r"\d{3}-\d{4}", text):
        return "[PHONE]"
    return "[PHONE]" if 9 <= digits <= 15 else None
