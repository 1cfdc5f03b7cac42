"""One answer at a time through ``ModelSession.generate``, behind the scheduler's interface.

The plain PyTorch path: each request is one ``generate`` call (merged weights for an
adapter, adapter layers off for the base; see ``inference/session.py``), run by one worker
thread in arrival order. It is what serves when continuous batching is not wanted, and the
reference the faster engines are checked against.
"""

from __future__ import annotations

import threading

from inference.generate import (
    GenerationSettings,
    StopWhenSet,
    encode,
    fitting,
    generate_kwargs,
    session_stop_ids,
    with_system,
)
from inference.session import ModelSession, check_base, is_base, read_adapter_folder
from serve.interface.stops import StopText
from serve.interface.ticket import Ticket
from serve.one_at_a_time import OneAtATime


class SerialEngine(OneAtATime):
    """Answers queued requests one by one with the session's own ``generate``.

    Args:
        session: the model session (its lock, threads and adapter routing are used as is).
        max_queue: waiting requests beyond which ``submit`` raises :class:`ServerBusy`.
    """

    name = "pytorch"

    def __init__(self, session: ModelSession, *, max_queue: int = 64):
        self.session = session
        super().__init__(max_queue=max_queue)

    def submit(self, messages: list[dict], adapter: str | None,
               settings: GenerationSettings | None = None, stop: list[str] | None = None) -> Ticket:
        """Queue one answer; returns at once with its :class:`Ticket`.

        Raises:
            ValueError: bad settings or messages, a prompt too long, an unusable adapter.
            ServerBusy: ``max_queue`` requests are already waiting.
        """
        settings = settings or GenerationSettings()
        settings.check()
        name = None if is_base(adapter) else adapter
        if name is not None:
            check_base(name, read_adapter_folder(name, self.session.adapter_folder(name)),
                       self.session.resolved)
        inputs = fitting(self.session, encode(self.session, [with_system(messages, settings)]))
        ticket = Ticket("base" if name is None else name, int(inputs["input_ids"].shape[1]), self._position)
        return self._enqueue(ticket, inputs, name, settings, StopText(stop))

    def _answer(self, ticket: Ticket, inputs: dict, adapter: str | None,
                settings: GenerationSettings, stop: StopText) -> None:
        from transformers import StoppingCriteriaList

        session = self.session
        out = _TicketStreamer(ticket, session.tokenizer, set(session_stop_ids(session)), stop)
        session.generate(inputs, [adapter], seed=settings.seed, streamer=out,
                         stopping_criteria=StoppingCriteriaList([StopWhenSet(out.halt)]),
                         **generate_kwargs(session, settings))
        out.flush()
        ticket.finish("stop" if out.ended or stop.hit else
                       "length" if ticket.completion_tokens >= settings.max_new_tokens else "cancelled")


class _TicketStreamer:
    """A ``generate`` streamer: new tokens -> text deltas on the ticket."""

    def __init__(self, ticket: Ticket, tokenizer, stop_ids: set[int], stop: StopText):
        self.ticket, self.tokenizer, self.stop_ids, self.stop = ticket, tokenizer, stop_ids, stop
        self.halt = threading.Event()  # set: the stopping criterion ends generate
        self.ended = False  # an end-of-turn token came
        self._ids: list[int] = []
        self._sent = 0  # characters of the decoded answer already handed on
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate's first call hands over the prompt
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            if self.ended or self.halt.is_set():
                return
            if token in self.stop_ids:
                self.ended = True
                self.halt.set()
                return
            self._ids.append(token)
            self.ticket.completion_tokens = len(self._ids)
            text = self.tokenizer.decode(self._ids, skip_special_tokens=True)
            if text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
                continue
            self.ticket.put_text(self.stop.feed(text[self._sent:]))
            self._sent = len(text)
            if self.stop.hit or self.ticket.cancelled:
                self.halt.set()

    def end(self) -> None:
        pass

    def flush(self) -> None:
        """Hand on the rest: a split character left at the cut, text held for stop strings."""
        if not self.stop.hit:
            text = self.tokenizer.decode(self._ids, skip_special_tokens=True)
            self.ticket.put_text(self.stop.feed(text[self._sent:]))
        self.ticket.put_text(self.stop.flush())
