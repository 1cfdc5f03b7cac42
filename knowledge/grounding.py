"""The prompt's grounding: the best passages for the customer's question, as a system message.

:func:`ground` searches a knowledge version with the customer's last message, read with the
earlier ones when it follows them up (:mod:`knowledge.followups`), within the past answers of
the intent it asks about where the version can tell it (:mod:`knowledge.routing`),
keeps the passages that fit the model's context (count and characters capped), refuses any
passage that spells a control token of the model (it stays on the shelf; it is never shown),
and puts the rest in the conversation's system message, after the system prompt. What was
shown is recorded (:meth:`Grounding.record`) with the answer, and said to the reader
(:meth:`Grounding.line`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from knowledge.followups import asked_in
from knowledge.passages import Passage, spells_control
from knowledge.routing import routed_search
from knowledge.store import LATEST, KnowledgeShelf

# One passage by default: measured as good as two on held-out rows, at half the prompt
# (docs/benchmarks.md, "Grounded answers ..."). A request may ask for more (``knowledge.k``).
DEFAULT_K = 1
MAX_K = 5
EXCLUDE_SLACK = 16  # more passages searched when some may be excluded (an evaluated row's own)
MAX_PASSAGE_CHARS = 1200  # one passage: a support answer is a few hundred characters
CHARS_PER_TOKEN = 3.5  # English text in a ~50k-token BPE vocabulary; a cautious estimate
TEMPLATE_TOKENS = 64  # the chat template's markers around the turns
INSTRUCTION = (
    "Answer the customer from the team's knowledge below when it fits, adapting it to "
    "this customer's question."
)


@dataclass
class Grounding:
    """What one answer was grounded in."""

    knowledge: str
    version: str
    fingerprint: str
    shown: list[tuple[int, Passage]] = field(default_factory=list)  # (id, passage), best first
    refused: list[int] = field(default_factory=list)  # ids that spell a control token
    dropped: list[int] = field(default_factory=list)  # ids the context had no room for
    excluded: list[int] | None = None  # ids the caller's ``exclude`` kept out (None: none asked)
    intent: str = ""  # the asked intent the search was routed to ("": every passage searched)
    earlier: int = 0  # the customer's earlier messages searched with the last (a follow-up)

    def record(self) -> dict:
        """The facts kept with the answer: the version and the passages' ids."""
        record = {
            "knowledge": self.knowledge,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "passage_ids": [i for i, _ in self.shown],
            "refused_ids": self.refused,
            "dropped_ids": self.dropped,
        }
        if self.excluded is not None:
            record["excluded_ids"] = self.excluded
        if self.intent:
            record["intent"] = self.intent
        if self.earlier:
            record["earlier_messages"] = self.earlier
        return record

    def line(self) -> str:
        """``answered from: <name> <version> #id "title", ...`` (or why nothing was shown)."""
        if not self.shown:
            return f"answered from: no passage of {self.knowledge} {self.version} matched"
        titles = ", ".join(f'#{i} "{_short(p.title)}"' for i, p in self.shown)
        line = f"answered from: {self.knowledge} {self.version} {titles}"
        if self.intent:
            line += f" ({_about(self.shown)} {self.intent})"
        if self.earlier:
            line += " (a follow-up: searched with the customer's earlier message)"
        if self.refused:
            line += (
                f" ({len(self.refused)} passage(s) refused: they spell the model's control tokens)"
            )
        return line


def ground(
    messages: list[dict],
    name: str,
    version: str = LATEST,
    *,
    k: int = DEFAULT_K,
    system_prompt: str = "",
    context_tokens: int = 2048,
    answer_tokens: int = 256,
    tokenizer=None,
    shelf: KnowledgeShelf | None = None,
    exclude: Callable[[Passage], bool] | None = None,
    route: bool = True,
) -> tuple[list[dict], Grounding]:
    """The conversation with the best passages for what it asks in its system message: the last
    user message, with the earlier ones it follows up (:func:`knowledge.followups.asked_in`).

    Args:
        messages: ``[{"role", "content"}, ...]`` ending with the customer's message.
        name, version: the knowledge version to search.
        k: passages shown at most (1..MAX_K).
        system_prompt: the system prompt, used when ``messages`` has no system message.
        context_tokens: the model's context; the passages get what the conversation and the
            answer (``answer_tokens``) leave of it.
        tokenizer: the model's tokenizer, for its own control tokens and to count the room in
            its tokens (None: the common control tokens, lengths estimated from characters).
        exclude: passages it says True for are never shown (an evaluation keeps its own rows'
            questions and answers out); the next best take their place.
        route: search the past answers of the intent the customer asks about where the
            version can tell it (:mod:`knowledge.routing`); False: every passage (and a
            follow-up is told only by the words that point back).

    Returns:
        ``(messages, grounding)``: the system message holds the prompt, then the passages.

    Raises:
        ValueError: no user message, ``k`` out of range, an unknown knowledge base or version.
    """
    if not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"the number of passages must be from 1 to {MAX_K}, not {k!r}")
    asked = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if not isinstance(asked, str):
        raise ValueError("grounding needs the customer's message (the last user message)")
    chosen = (shelf or KnowledgeShelf()).get(name, version or LATEST)
    question = asked_in(chosen if route else None, messages)
    depth = k if exclude is None else k + EXCLUDE_SLACK
    found = routed_search(chosen, question.text, depth, route=route)
    grounding = Grounding(
        chosen.name,
        chosen.version,
        chosen.fingerprint,
        excluded=None if exclude is None else [],
        intent=found.intent,
        earlier=question.earlier,
    )
    size = _sizer(tokenizer)
    used = sum(size(str(m.get("content", ""))) for m in messages) + size(system_prompt)
    room = context_tokens - answer_tokens - TEMPLATE_TOKENS - size(INSTRUCTION) - used
    blocks = []
    for hit in found.hits:
        if len(grounding.shown) + len(grounding.refused) + len(grounding.dropped) >= k:
            break
        if exclude is not None and exclude(hit.passage):
            grounding.excluded.append(hit.id)
            continue
        if spells_control(hit.passage, tokenizer):
            grounding.refused.append(hit.id)
            continue
        block = _block(len(blocks) + 1, hit.passage)
        cost = size(block) + 1  # the blank line between blocks
        if cost > room:
            grounding.dropped.append(hit.id)
            continue
        room -= cost
        blocks.append(block)
        grounding.shown.append((hit.id, hit.passage))
    if not blocks:
        return list(messages), grounding
    return _with_system(messages, system_prompt, _knowledge(blocks)), grounding


def shown_alone(messages: list[dict], passage: Passage, system_prompt: str = "") -> list[dict]:
    """The conversation as :func:`ground` gives it when ``passage`` is the one passage shown
    (the system message and its text the same, character for character): what a warm-up reads
    so that a later answer grounded in ``passage`` starts from the state it left."""
    return _with_system(messages, system_prompt, _knowledge([_block(1, passage)]))


def _knowledge(blocks: list[str]) -> str:
    """The system message's knowledge part: the instruction, then the passages' blocks."""
    return "\n\n".join([INSTRUCTION, *blocks])


def _sizer(tokenizer) -> Callable[[str], float]:
    """A text's length in the model's tokens where its tokenizer is at hand; estimated from its
    characters otherwise."""
    if tokenizer is None:
        return lambda text: len(text) / CHARS_PER_TOKEN
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def _block(number: int, p: Passage) -> str:
    text = p.text if len(p.text) <= MAX_PASSAGE_CHARS else p.text[:MAX_PASSAGE_CHARS] + "…"
    if p.kind == "past_answer" and p.question:
        return f"[{number}] A customer asked: {p.question}\nThe team answered: {text}"
    return f"[{number}] {p.title}\n{text}"


def _with_system(messages: list[dict], system_prompt: str, knowledge: str) -> list[dict]:
    """Knowledge appended to the first system message (one system turn: some templates take
    no second), or a new one made of the system prompt and the knowledge."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content') or ''}\n\n{knowledge}".lstrip()
        return out
    head = f"{system_prompt}\n\n{knowledge}" if system_prompt else knowledge
    return [{"role": "system", "content": head}, *out]


def _about(shown: list[tuple[int, Passage]]) -> str:
    """What the routed passages shown were: the intent's article, or its past answers."""
    return "the article about" if shown[0][1].kind != "past_answer" else "past answers about"


def _short(title: str, limit: int = 48) -> str:
    title = " ".join(title.split())
    return title if len(title) <= limit else title[: limit - 1] + "…"
