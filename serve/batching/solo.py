"""One request answered alone by plain ``generate``: the scheduler's path for a model it
cannot batch (``support.py``). Its tokens stream into the request's ticket as ``generate``
makes them; the ticket ending (a stop string, a cancel, a timeout) stops ``generate`` at its
next step."""

from __future__ import annotations

from collections.abc import Callable

import torch

from inference.generate import generate_kwargs, session_stop_ids
from inference.session import ModelSession
from serve.batching.decoding import accept_token


class _TicketStreamer:
    """A ``generate`` streamer (``put`` / ``end``) writing one request's tokens into its ticket."""

    def __init__(self, request, stop_ids: set[int], on_token: Callable[[], None]):
        self.request, self.stop_ids, self.on_token = request, stop_ids, on_token
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # generate hands the prompt over first
            self.prompt_seen = True
            return
        for token in value.view(-1).tolist():
            if not self.request.ticket.done:
                accept_token(self.request, int(token), self.stop_ids)
        self.on_token()

    def end(self) -> None:
        pass


class _StopWhenDone:
    """Stops ``generate`` once the ticket has ended (stop string, cancel, timeout)."""

    def __init__(self, ticket):
        self.ticket = ticket

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        ended = self.ticket.done or self.ticket.cancelled
        return torch.full((input_ids.shape[0],), ended, dtype=torch.bool, device=input_ids.device)


def answer_alone(session: ModelSession, request, on_token: Callable[[], None]) -> None:
    """Answer ``request`` (the scheduler's row: prompt ids, adapter, settings, ticket, text
    stream) with one ``generate`` call; ``on_token()`` runs after each token (the scheduler's
    heartbeat for the requests waiting their turn).

    Raises:
        Exception: whatever ``generate`` raised; the caller fails the ticket with it.
    """
    from transformers import StoppingCriteriaList

    ticket = request.ticket
    if ticket.cancelled:
        ticket.finish("cancelled")
        return
    ids = torch.tensor([request.prompt], dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    streamer = _TicketStreamer(request, set(session_stop_ids(session)), on_token)
    session.generate(
        inputs,
        [request.adapter],
        seed=request.settings.seed,
        streamer=streamer,
        stopping_criteria=StoppingCriteriaList([_StopWhenDone(ticket)]),
        **generate_kwargs(session, request.settings),
    )
    if ticket.cancelled:
        ticket.finish("cancelled")
    elif not ticket.done:  # generate ended without a stop id (its own length cap)
        ticket.put_text(request.stream.finish())
        ticket.finish("length")
