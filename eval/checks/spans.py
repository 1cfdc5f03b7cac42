"""Spans an answer may state as facts: contact details, prices, order and account numbers, dates.

Personal data (cards, e-mails, order numbers, phones) is found by the transcript redaction's
own detectors (``core.redact.find``), so evaluation and import agree on what personal
data is; URLs, prices, account numbers and dates are added here. Template placeholders
(``{{Order Number}}`` in Bitext, ``[ORDER]`` left by the redaction) are removed first: a
placeholder states nothing.

Spans are compared in a normal form (digits only for phones and cards, capitals for order and
account ids, lower case for the rest), so "+1 (555) 123-4567" in the prompt allows
"555-123-4567"... only when the digits agree in full: "15551234567" and "5551234567" differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.redact import find as find_personal

CONTACT_KINDS = ("phone", "email", "url")
PERSONAL_KINDS = ("card", "email", "order", "phone")  # the redaction's kinds (names aside)
KINDS = ("phone", "email", "url", "price", "order", "account", "date", "card")
_NUMERIC = {"phone", "card", "order", "account"}

PLACEHOLDER = re.compile(r"\{\{[^{}]{0,80}\}\}|\[[A-Z][A-Z_ ]{0,30}\]")
_URL = re.compile(
    r"\b(?:https?://|www\.)[^\s<>\"'(){}\[\]]+"
    r"|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|org|net|io|co|uk|de|fr|info|biz|shop|store|app|help)\b"
    r"(?:/[^\s<>\"'(){}\[\]]*)?",
    re.I,
)
_PRICE = re.compile(
    r"[$€£]\s?\d[\d,]*(?:\.\d{1,2})?|\b\d[\d,]*(?:\.\d{1,2})?\s?(?:USD|EUR|GBP|dollars|euros|pounds)\b",
    re.I,
)
_ACCOUNT = re.compile(
    r"(?i)\baccount\s*(?:number|no\.?|id|#)?\s*[:#]?\s*#?(?=[A-Z0-9-]*\d)([A-Z0-9][A-Z0-9-]{3,})\b"
)
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_DATE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b"
    rf"|\b{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? \d{{4}})?\b"
)
_TRAILING = ".,;:!?)'\""


@dataclass(frozen=True)
class Span:
    """One stated fact: its kind, its text as written, and its normal form."""

    kind: str
    text: str

    @property
    def key(self) -> str:
        return normal(self.kind, self.text)


def normal(kind: str, text: str) -> str:
    """The form two spans are compared in."""
    if kind in ("phone", "card"):
        return re.sub(r"\D", "", text)
    if kind in ("order", "account"):
        return re.sub(r"[^0-9A-Z]", "", text.upper())
    if kind == "url":
        return re.sub(r"^(?:https?://)?(?:www\.)?", "", text.lower()).rstrip("/")
    if kind == "price":
        number = re.sub(r"[^\d.]", "", text)
        try:
            return f"{float(number):g}"
        except ValueError:
            return number
    return " ".join(text.lower().split())


def find_spans(text: str) -> list[Span]:
    """Every fact-like span of ``text`` (placeholders removed), personal data first."""
    text = PLACEHOLDER.sub(" ", text or "")
    spans = [Span(kind, span) for kind, span in find_personal(text)]
    rest = text
    for s in spans:  # a phone's digits are not also a price, an e-mail's domain not a URL
        rest = rest.replace(s.text, " ")
    for m in _URL.finditer(rest):
        spans.append(Span("url", m.group().rstrip(_TRAILING)))
    rest = _URL.sub(" ", rest)
    spans += [Span("price", m.group().strip()) for m in _PRICE.finditer(rest)]
    spans += [Span("account", m.group(1)) for m in _ACCOUNT.finditer(rest)]
    spans += [Span("date", m.group()) for m in _DATE.finditer(rest)]
    return list(dict.fromkeys(spans))


class Known:
    """The facts some texts state, to ask whether a span was stated there.

    A span is known when the same kind and normal form was found in the texts, or, for ids and
    numbers, when it is one whole run of letters and digits there ("purchase 00123842" states
    the order number 00123842), or, for the rest, when its normal form occurs in the lower-case
    text.
    """

    def __init__(self, texts):
        self.keys: set[tuple[str, str]] = set()
        self.runs: set[str] = set()
        parts = []
        for text in texts:
            if not text:
                continue
            for s in find_spans(text):
                self.keys.add((_group(s.kind), s.key))
            self.runs.update(re.findall(r"[0-9A-Z]+", text.upper()))
            parts.append(" ".join(text.lower().split()))
        self.text = "\n".join(parts)

    def __contains__(self, span: Span) -> bool:
        key = span.key
        if not key or (_group(span.kind), key) in self.keys:
            return True
        if span.kind in _NUMERIC:
            return key in self.runs
        return key in self.text


def _group(kind: str) -> str:
    """Order, account, phone and card numbers compare as numbers: a number is a number."""
    return "number" if kind in _NUMERIC else kind
