"""A passage: one piece of text the bot may answer from, with where it came from.

Passages are text, never template: they are stored exactly as given. Whether one spells the
model's control tokens (``<|im_start|>`` ...) is a question the prompt builder asks with
:func:`control_spellings` before it puts a passage in front of the model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from core.templates import COMMON_CONTROL

KINDS = ("past_answer", "article", "macro")


@dataclass(frozen=True)
class Passage:
    """One passage of a knowledge base."""

    title: str  # article title, heading, or the question's first words
    text: str  # what the bot may use: the answer, the section's body
    source: str  # the file (and heading), URL or row it came from
    kind: str = "article"  # one of KINDS
    question: str = ""  # for a past answer: the customer's question it answered
    intent: str = ""  # a past answer's labelled intent; an article's: the intent it answers

    def to_dict(self) -> dict:
        """The fields; ``intent`` only when set, so a passage without one reads (and is
        fingerprinted) as it was before passages had intents."""
        fields = asdict(self)
        if not self.intent:
            fields.pop("intent")
        return fields


def check(passage: Passage) -> Passage:
    """Return ``passage`` when its fields are usable; otherwise raise a sentence.

    Raises:
        ValueError: an unknown kind, or no text.
    """
    if passage.kind not in KINDS:
        raise ValueError(
            f"unknown passage kind {passage.kind!r}; expected one of {', '.join(KINDS)}"
        )
    if not passage.text.strip():
        raise ValueError(f"the passage {passage.title!r} from {passage.source} has no text")
    return passage


def fingerprint(passages: list[Passage]) -> str:
    """16 hex characters naming the content of ``passages`` (order included)."""
    digest = hashlib.sha256()
    for p in passages:
        digest.update(json.dumps(p.to_dict(), sort_keys=True, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def control_spellings(text: str, tokenizer=None) -> list[str]:
    """The control-token spellings found in ``text``.

    Args:
        text: a passage's text (or title, or question).
        tokenizer: the model's tokenizer; its special tokens are the list
            (:func:`core.templates.control_strings`). Without one, the spellings of the common
            chat templates are looked for.
    """
    if tokenizer is not None:
        from core.templates import control_strings

        return control_strings(tokenizer, text)
    return COMMON_CONTROL.findall(text or "")


def spells_control(passage: Passage, tokenizer=None) -> bool:
    """Whether any field of ``passage`` spells a control token of the model."""
    return any(
        control_spellings(t, tokenizer) for t in (passage.title, passage.question, passage.text)
    )
