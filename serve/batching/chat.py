"""Chat and Compare answered through the session's shared scheduler.

The same calls as :func:`inference.generate.stream_chat` and :func:`inference.generate.compare`
(same arguments, same results), but every answer becomes a row of the one running batch
(``shared_scheduler``), so a chat, a Compare and API requests that arrive together are decoded
together instead of waiting for each other.
"""

from __future__ import annotations

from collections.abc import Iterator

from inference.generate import Answer, GenerationSettings, check_rows
from inference.session import ModelSession
from serve.batching.scheduler import Scheduler, shared_scheduler
from serve.interface.ticket import answers_together


def stream_chat(session: ModelSession, messages: list[dict], adapter: str | None = None,
                settings: GenerationSettings | None = None,
                scheduler: Scheduler | None = None) -> Iterator[str]:
    """Stream one answer; yields the text so far (accumulated, not deltas).

    Closing the generator early cancels the answer at the next decode step.

    Raises:
        ValueError: bad settings or messages, or an unusable adapter (before any text).
        ServerBusy: the waiting queue is full.
    """
    ticket = (scheduler or shared_scheduler(session)).submit(messages, adapter, settings)
    text = ""
    try:
        for delta in ticket:
            text += delta
            yield text
    finally:
        ticket.cancel()  # no-op once the answer is done; stops it when the reader left
    if not text:
        yield text  # an empty answer is still one value for the chat to show


def compare(session: ModelSession, messages: list[dict], adapters: list[str | None],
            settings: GenerationSettings | None = None,
            scheduler: Scheduler | None = None) -> list[Answer]:
    """Answer the same conversation with each adapter (``None``: base), as rows of one batch.

    ``seconds`` of every answer is the wall time until the last pane was done.
    """
    if not adapters:
        raise ValueError("compare needs at least one adapter (None for the base model)")
    settings = settings or GenerationSettings()
    settings.check()
    check_rows(session, adapters)
    hashes = [session.adapter_hash(a) for a in adapters]  # loads and checks each adapter
    scheduler = scheduler or shared_scheduler(session)
    return answers_together([lambda a=a: scheduler.submit(messages, a, settings) for a in adapters],
                            hashes)
