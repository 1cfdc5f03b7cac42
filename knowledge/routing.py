"""Past answers of the asked intent first: a search routed by what the customer asks about.

BM25 alone matches words, and a customer's few words often match a past answer to another
question ("change my order" and "cancel my order" share two). A knowledge version whose past
answers keep their labelled intents (a labelled training split) knows more: the question
classifier of the check before an answer is sent (:func:`knowledge.answer_check.checker_for`,
fitted on those past answers' questions, once per version) names the intent asked about.
When it names one with a clear lead (at least :data:`knowledge.answer_check.MIN_MARGIN` over
the runner-up), only the past answers labelled with that intent, and the passages with no
intent (articles, macros), are searched. When it is guessing, when the version keeps no
intents, or when no past answer of that intent matches a word of the question (a classifier
fitted on a few rows names an intent for anything), the search is the plain BM25 one over
every passage.

An article (or macro) labelled with the intent (``<!-- intent: NAME -->`` in its Markdown
section, an ``intent`` column beside ``title``/``body``) is the team's current word on it: a
search routed to that intent shows it first, even where past answers of the intent match the
question better, and so does a search not routed whose best passage is a past answer of that
intent: a changed policy written in the article is what customers are told.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from knowledge import index
from knowledge.answer_check import MIN_MARGIN, checker_for
from knowledge.passages import Passage
from knowledge.store import Version


@dataclass
class Routed:
    """What a routed search found, and why it was or was not routed."""

    hits: list[index.Hit] = field(default_factory=list)
    intent: str = ""  # the intent searched within ("": every passage was searched)
    note: str = ""  # why it was not routed ("" when it was)


def routed_search(version: Version, question: str, k: int, *, route: bool = True) -> Routed:
    """The ``k`` best passages for ``question``: of the asked intent where it is clear.

    Args:
        version: the knowledge version searched.
        question: the customer's message.
        k: passages returned at most.
        route: False searches every passage (as the version's BM25 alone ranks them).
    """
    if not route:
        return Routed(version.search(question, k), note="not routed: asked not to")
    asked, note = asked_intent(version, question)
    if asked:
        hits = version.search(question, max(k, ROUTED_LOOK), intent=asked)
        if any(h.passage.intent == asked for h in hits):
            return Routed(articles_first(version, asked, hits)[:k], asked)
        # only articles matched: the classifier named an intent the question shares no word
        # with (a few labelled rows, a question about something else)
        note = f"not routed: no past answer of {asked} matches a word of the question"
    hits = version.search(question, k)
    if hits and hits[0].passage.kind == "past_answer" and hits[0].passage.intent:
        hits = articles_first(version, hits[0].passage.intent, hits)[:k]  # its intent's word
    return Routed(hits, note=note)


def articles_first(version: Version, intent: str, hits: list[index.Hit]) -> list[index.Hit]:
    """``hits`` with the articles labelled ``intent`` first: those the search found, in its
    order, then the version's others (score 0, in id order), then the rest of ``hits``."""
    labelled = version.articles_of(intent)
    if not labelled:
        return hits
    found = [h for h in hits if h.passage.kind != "past_answer" and h.passage.intent == intent]
    seen = {h.id for h in found}
    unmatched = [index.Hit(i, 0.0, p) for i, p in labelled if i not in seen]
    return found + unmatched + [h for h in hits if h.id not in seen]


ROUTED_LOOK = 20  # passages looked at for a past answer of the asked intent among the matches


def asked_intent(version: Version, question: str) -> tuple[str, str]:
    """``(intent, "")`` when the version's question classifier names one with a clear lead;
    ``("", why not)`` otherwise."""
    checker, why = checker_for(version)
    if checker is None:
        return "", f"not routed: {why}"
    asked, margin = checker.questions.named(question)
    if not asked:
        return "", "not routed: the question has no words to classify"
    if margin < MIN_MARGIN:
        return "", f"not routed: the asked intent is uncertain (lead {margin:.2f})"
    return asked, ""


ORDER_SAMPLE = 2000  # questions routed to rank the passages (spread evenly over the version)
_ORDERS: dict[tuple, dict[int, int]] = {}  # (index, fingerprint, sample) -> passage id -> hits


def likely_first(version: Version, sample: int = ORDER_SAMPLE) -> list[tuple[int, Passage]]:
    """Every ``(id, passage)`` of ``version``, those customers are most likely to be shown first.

    A passage's rank is how often it is the routed top hit (:func:`routed_search`, k=1) of the
    version's own questions (a past answer's question, else the passage's title), its own
    passage left out: up to ``sample`` of them, spread evenly over the version. Passages no
    question reached, and ties, keep the version's order. A version never changes, so its
    counts are worked out once per process (each model warmed, each replay, reuses them).
    """
    every = version.passages_page(0, None)
    key = (str(version.index_path), version.fingerprint, sample)
    if key not in _ORDERS:
        hits: Counter = Counter()
        for own, passage in every[:: -(-len(every) // max(1, sample))]:
            found = routed_search(version, passage.question or passage.title, 2).hits
            other = next((h.id for h in found if h.id != own), None)
            if other is not None:
                hits[other] += 1
        _ORDERS[key] = dict(hits)
    hits = _ORDERS[key]
    return sorted(every, key=lambda row: -hits.get(row[0], 0))  # stable: ties keep their order
