"""The one interface every serving engine offers (llama-server's, PyTorch's batching scheduler).

An engine takes a conversation and answers it as a stream: ``submit`` checks the request,
queues it and returns a :class:`~serve.interface.ticket.Ticket` at once; the engine then writes
the answer into the ticket (``put_text``, ``finish``, ``fail``) while the caller reads it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from inference.generate import GenerationSettings
from serve.interface.ticket import Ticket


@runtime_checkable
class Engine(Protocol):
    """A serving engine."""

    name: str  # "llama.cpp" or "pytorch"

    @property
    def label(self) -> str:
        """What its answers are labelled with: engine and weights, e.g. ``llama.cpp q8_0``."""

    def submit(
        self,
        messages: list[dict],
        adapter: str | None,
        settings: GenerationSettings | None = None,
        stop: list[str] | None = None,
    ) -> Ticket:
        """Queue one answer (``adapter`` None or ``"base"``: the base model).

        Raises:
            ValueError: bad settings or messages, a prompt too long, an unusable adapter.
            ServerBusy: the engine's queue is full.
        """
