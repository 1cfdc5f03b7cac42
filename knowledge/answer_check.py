"""Checked before it speaks: does the answer address what the customer asked?

Two classifiers (:mod:`knowledge.intent_classifier`) are fitted on a knowledge version's
labelled passages (the past answers of a labelled training split), once per version (kept for
the last few versions): one on their questions names the intent the customer asks about, one on
their answers (the release checks' classifier) names the intent the bot's answer addresses. When
the two agree the answer is sent as it is (``ok``). When they disagree, the bot answers again
with the team's answer for the asked intent: its article labelled with it where it has one,
else the best BM25 match for the customer's question among the past answers labelled with it
(``re-answered``). When there is no such past
answer, or the question classifier's lead over its runner-up is below ``min_margin`` (it is
guessing between intents), the customer gets a hand-off sentence instead (``handed off``). A
version without labelled past answers (made before past answers kept intents, or from unlabelled
data) cannot be checked: the answer is sent as it is, with a note saying why (``skipped``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from knowledge import index
from knowledge.intent_classifier import IntentClassifier, fit
from knowledge.store import LATEST, KnowledgeShelf, Version

OUTCOMES = ("ok", "re-answered", "handed off", "skipped")
MIN_MARGIN = 0.2  # LinearSVC decision values: `python -m bench answer-check` chose it
SEARCH_DEPTH = 50  # BM25 hits looked through for a past answer of the asked intent
CACHED_VERSIONS = 4
_CACHE: OrderedDict[tuple[str, str], tuple] = OrderedDict()  # (folder, fingerprint) -> fitted
_LOCK = threading.Lock()
HANDOFF = (
    "I want to be sure you get the right answer, so I am passing your request to a person on "
    "our support team, who will reply to you shortly."
)


@dataclass
class CheckResult:
    """What the check decided for one answer."""

    outcome: str  # one of OUTCOMES
    text: str  # what the customer gets: the answer, a past answer, or the hand-off sentence
    asked: str = ""  # the intent the customer asked about ("" unknown)
    answered: str = ""  # the intent the bot's answer addresses
    passage_id: int | None = None  # the past answer re-answered with
    knowledge: str = ""
    version: str = ""
    note: str = ""  # why it was skipped or handed off

    def record(self) -> dict:
        """The facts kept with the answer (the text itself is the answer's)."""
        return {
            "outcome": self.outcome,
            "asked": self.asked,
            "answered": self.answered,
            "passage_id": self.passage_id,
            "knowledge": self.knowledge,
            "version": self.version,
            "note": self.note,
        }


@dataclass
class Checker:
    """The two classifiers of one knowledge version."""

    version: Version
    questions: IntentClassifier
    answers: IntentClassifier

    def check(
        self, question: str, answer: str, *, min_margin: float = MIN_MARGIN, handoff: str = HANDOFF
    ) -> CheckResult:
        """Check one answer to ``question`` (see the module's docstring)."""
        asked, margin = self.questions.named(question)
        answered = self.answers.predict([answer])[0]
        facts = {
            "asked": asked,
            "answered": answered,
            "knowledge": self.version.name,
            "version": self.version.version,
        }
        if asked and asked == answered:
            return CheckResult("ok", answer, **facts)
        if not asked:
            return CheckResult(
                "handed off", handoff, note="the question has no words to classify", **facts
            )
        if margin < min_margin:
            return CheckResult(
                "handed off",
                handoff,
                note=f"the asked intent is uncertain (lead {margin:.2f} < {min_margin:g})",
                **facts,
            )
        hit = nearest(self.version, question, asked)
        if hit is None:
            return CheckResult(
                "handed off",
                handoff,
                note=f"no past answer of {asked} matches the question",
                **facts,
            )
        return CheckResult("re-answered", hit.passage.text, passage_id=hit.id, **facts)


def nearest(version: Version, question: str, intent: str) -> index.Hit | None:
    """The team's answer to ``question`` about ``intent``: its article labelled ``intent``
    where it has one (the best BM25 match among several; the team's current word outranks its
    past answers, as in :func:`knowledge.routing.articles_first`), else the best BM25 match
    among the past answers labelled ``intent``."""
    hits = version.search(question, SEARCH_DEPTH)
    articles = version.articles_of(intent)
    if articles:
        ids = {i for i, _ in articles}
        found = next((h for h in hits if h.id in ids), None)
        return found or index.Hit(articles[0][0], 0.0, articles[0][1])
    for hit in hits:
        if hit.passage.kind == "past_answer" and hit.passage.intent == intent:
            return hit
    return None


def checker_for(version: Version) -> tuple[Checker | None, str]:
    """The checker of ``version`` (fitted at first use, kept for the last few versions), or
    None and a sentence saying why it cannot be checked against."""
    key = (str(version.folder), version.fingerprint)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    found = _fit_checker(version)  # outside the lock: fitting takes a while on a big version
    with _LOCK:
        _CACHE[key] = found
        while len(_CACHE) > CACHED_VERSIONS:
            _CACHE.popitem(last=False)
    return found


def _fit_checker(version: Version) -> tuple[Checker | None, str]:
    where = f"{version.name} {version.version}"
    if not index.has_intents(version.index_path):
        return None, f"{where} keeps no intents (it was made before past answers kept them)"
    # Labelled past answers teach both classifiers; labelled articles teach the answers' one
    # (an answer may speak in an article's words). Re-answers come from both.
    labelled = [p for _, p in version.passages_page() if p.intent]
    asked = [p for p in labelled if p.question.strip()]
    try:
        questions = fit([p.question for p in asked], [p.intent for p in asked])
        answers = fit([p.text for p in labelled], [p.intent for p in labelled])
    except ValueError as err:
        return None, f"{where} cannot train the check: {err}"
    return Checker(version, questions, answers), ""


def check_answer(
    question: str,
    answer: str,
    knowledge: str,
    version: str = LATEST,
    *,
    shelf: KnowledgeShelf | None = None,
    min_margin: float = MIN_MARGIN,
    handoff: str = HANDOFF,
) -> CheckResult:
    """Check ``answer`` to ``question`` against the labelled past answers of a knowledge version.

    Args:
        question: the customer's message.
        answer: the bot's answer.
        knowledge, version: the knowledge version whose past answers train the check.
        min_margin: the question classifier's least lead to re-answer rather than hand off.
        handoff: the sentence a handed-off customer gets.

    Returns:
        The outcome and the text to send; ``skipped`` (the answer unchanged, with a note) when
        the version cannot be checked against.

    Raises:
        ValueError: no such knowledge base or version.
    """
    chosen = (shelf or KnowledgeShelf()).get(knowledge, version or LATEST)
    checker, why = checker_for(chosen)
    if checker is None:
        return CheckResult(
            "skipped",
            answer,
            knowledge=chosen.name,
            version=chosen.version,
            note=f"not checked: {why}",
        )
    return checker.check(question, answer, min_margin=min_margin, handoff=handoff)
