"""What a conversation asks: the customer's last message, read with the ones before it when it
is a follow-up.

"How long will that take?" after "I want a refund for my order" asks about the refund, yet
alone its words are those of a question about delivery times, and "what do I do next?" names
nothing at all. A follow-up is a last message the version's question classifier
(:func:`knowledge.answer_check.checker_for`) cannot name an intent for with a clear lead
(:data:`knowledge.answer_check.MIN_MARGIN`), or a short one that points back ("that", "it",
... in at most :data:`MAX_POINTING_WORDS` words a search ranks by; English words). It is read
with the customer's message before it, and that one, when it is a follow-up too, with the one
before it (:data:`MAX_MESSAGES` in all): the search and both classifiers of the check before an
answer is sent are given the messages joined. A clear new question ("Also, how do I change my
address?") is read alone, so a customer who changes the subject gets passages about the new one.
A version whose passages keep no intents has no classifier: there only the short pointing
messages are read with the one before.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowledge import index
from knowledge.answer_check import MIN_MARGIN, checker_for
from knowledge.store import Version

# "then" and "one" are left out: "then delete my account", "a refund for the last one" ask anew
POINTING = frozenset(("it", "its", "that", "this", "these", "those", "them", "they", "there"))
MAX_POINTING_WORDS = 3  # ranked words of a message that points back: longer ones say their topic
MAX_MESSAGES = 3  # customer messages read together at most


@dataclass(frozen=True)
class Asked:
    """What a conversation asks."""

    text: str  # what is searched and classified: the last message, or it after earlier ones
    earlier: int = 0  # the customer's earlier messages read with the last one


def asked_in(version: Version | None, messages: list[dict]) -> Asked:
    """What ``messages`` ask of ``version`` (None: no classifier; only pointing messages are
    read with the one before): the customer's last message, after the earlier messages it
    follows up (see the module's docstring). ``Asked("")`` when no user message is text."""
    said = [
        m["content"]
        for m in messages
        if m.get("role") == "user" and isinstance(m.get("content"), str)
    ]
    if not said:
        return Asked("")
    checker = checker_for(version)[0] if version is not None else None
    first = len(said) - 1
    while first > 0 and len(said) - first < MAX_MESSAGES and follows_up(said[first], checker):
        first -= 1
    return Asked(" ".join(said[first:]), len(said) - 1 - first)


def follows_up(message: str, checker=None) -> bool:
    """Whether ``message`` leans on what was said before it: it points back in a few words, or
    ``checker``'s question classifier cannot tell what it asks about."""
    words = index.content_words(message)
    if len(words) <= MAX_POINTING_WORDS and POINTING.intersection(index.words(message)):
        return True
    if checker is None:
        return False
    return checker.questions.named(message)[1] < MIN_MARGIN
