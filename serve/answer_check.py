"""Checked before it speaks, in ``/v1``: the answers of an alias with ``check: on``.

The whole answer is generated first, then checked (:func:`knowledge.answer_check.check_answer`:
the customer's intent against the answer's; a follow-up's intent is read with the messages it
follows up, :func:`knowledge.followups.asked_in`), then sent: as it is (``ok``), replaced by the
nearest past answer of the asked intent (``re-answered``), or by a hand-off sentence (``handed
off``). A streamed answer is therefore streamed only once it is whole and checked, as one
content chunk. The knowledge version checked against is the one the answer was grounded in,
else the one the adapter was trained beside (its manifest's ``knowledge``); with neither, or
with a version that keeps no intents or was deleted, the answer is sent unchanged and marked
``skipped`` with the reason. The outcome is named in the ``X-TuneDesk-Check`` header, in a
whole answer's ``tunedesk_check`` object (a streamed answer's finish chunk), and in the stored
answer's record. A replaced text is a whole answer of its own: it ends with ``stop`` and its
``usage.completion_tokens`` counts its own tokens (:func:`sent_counts`), not the generated
answer's, which may have been cut at ``max_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from knowledge.answer_check import CheckResult, check_answer
from knowledge.followups import asked_in
from knowledge.store import LATEST, KnowledgeShelf

CHECK_HEADER = "X-TuneDesk-Check"
REPLACED = ("re-answered", "handed off")  # the outcomes that send another text than generated


@dataclass
class SentCounts:
    """How a replaced answer ends, as :func:`serve.streaming.usage` and the finish read it."""

    prompt_tokens: int
    completion_tokens: int
    engine: str
    cached_tokens: int | None = None
    finish_reason: str = "stop"


def knowledge_for(grounding: dict | None, adapter: str | None, shelf) -> tuple[str, str] | None:
    """``(name, version)`` to check against: the grounding's, else the adapter's own (None:
    neither)."""
    if grounding:
        return grounding["knowledge"], grounding["version"]
    if adapter is None:
        return None
    try:
        entry = (shelf.get(adapter).manifest or {}).get("knowledge") or {}
    except ValueError:
        return None
    return (entry["name"], entry.get("version") or LATEST) if entry.get("name") else None


def run_check(
    messages: list[dict], text: str, grounding: dict | None, adapter: str | None, shelf
) -> CheckResult:
    """The check of ``text``, answering ``messages`` (``skipped`` with a note when it cannot be
    made: the answer is never lost to a missing knowledge version)."""
    where = knowledge_for(grounding, adapter, shelf)
    if where is None:
        return CheckResult(
            "skipped",
            text,
            note="not checked: the answer was not grounded and "
            f"{adapter or 'the base model'} was trained beside no knowledge version",
        )
    try:
        chosen = KnowledgeShelf().get(*where)
        question = asked_in(chosen, messages).text  # a follow-up with what it follows up
        return check_answer(question, text, chosen.name, chosen.version)
    except ValueError as err:  # a knowledge version deleted since, say
        return CheckResult("skipped", text, note=f"not checked: {err}")


async def checked(deltas, messages: list[dict], grounding: dict | None, adapter: str | None, shelf):
    """Wait for the whole answer, check it: ``(result, deltas of the text to send)``.

    Raises:
        Exception: what the answer's source raised (the caller answers in OpenAI's shape).
    """
    text = "".join([delta async for delta in deltas])
    result = await run_in_threadpool(run_check, messages, text, grounding, adapter, shelf)

    async def replay():
        if result.text:
            yield result.text

    return result, replay()


def sent_counts(answer, result: CheckResult, tokenizer):
    """``answer``'s end and counts as the customer gets it.

    Args:
        answer: the generated answer's ticket or tally (``prompt_tokens``,
            ``completion_tokens``, ``finish_reason``, ``engine``, maybe ``cached_tokens``).
        result: the check of it.
        tokenizer: the served model's: a replaced text is counted in its tokens, as an
            answer's are (no end-of-turn token).

    Returns:
        ``answer`` itself for a text sent as generated (``ok``, ``skipped``); for a replaced one,
        its prompt counts with ``finish_reason`` ``"stop"`` and the text sent's tokens.
    """
    if result.outcome not in REPLACED:
        return answer
    ids = tokenizer(result.text, add_special_tokens=False)["input_ids"] if result.text else []
    return SentCounts(
        answer.prompt_tokens, len(ids), answer.engine, getattr(answer, "cached_tokens", None)
    )


def header(result: CheckResult | None) -> dict:
    """The response header naming the outcome (and the intents compared), none when unchecked."""
    if result is None:
        return {}
    said = result.outcome
    if result.asked or result.answered:
        said += f"; asked={result.asked or '?'}; answered={result.answered or '?'}"
    return {CHECK_HEADER: said.encode("ascii", "replace").decode("ascii")}
