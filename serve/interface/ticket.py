"""One request's handle: its text streams out of it as the scheduler decodes it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

from serve.interface.bounds import AnswerBound, answer_bound, failure_sentence, timeout_error

_END = object()


class ServerBusy(RuntimeError):
    """The waiting queue is full; the client should try again shortly."""


class EngineRefused(ValueError):
    """The engine refused the request as asked (llama-server's 400: a JSON schema it cannot
    use, say); ``param`` names the request's field when one is to blame."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class Ticket:
    """One request in a :class:`~serve.batching.scheduler.Scheduler`.

    Iterating yields the answer's new text (deltas) as it is decoded and raises the
    request's error, if it failed. Stopping the iteration early cancels the request. Every
    wait on it (iterating, :meth:`text`) is bounded by ``bound``
    (:mod:`serve.interface.bounds`): past it, the request is cancelled and fails with
    ``AnswerTimeout``, so no reader waits on an engine that lost it or is stuck.

    Attributes:
        adapter: the adapter name, or ``"base"``, that produced the answer.
        finish_reason: ``"stop"`` (end of turn or a stop string), ``"length"``
            (``max_new_tokens`` reached) or ``"cancelled"`` once done; ``None`` before.
        prompt_tokens: tokens of the rendered conversation.
        completion_tokens: answer tokens so far, not counting the end-of-turn token.
    """

    def __init__(
        self, adapter: str, prompt_tokens: int, position_of, bound: AnswerBound | None = None
    ):
        self.adapter, self.prompt_tokens = adapter, prompt_tokens
        self.bound = bound or answer_bound()
        self._queued = self._progress = time.monotonic()
        self.finish_reason: str | None = None
        self.completion_tokens = 0
        self.cached_tokens: int | None = None  # prompt tokens restored, where the engine says
        self.error: BaseException | None = None
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled, self._done = threading.Event(), threading.Event()
        self._position_of = position_of
        self._parts: list[str] = []
        self._when_done: list = []

    @property
    def position(self) -> int:
        """Place in the waiting queue (1 = next in line); 0 once decoding or done."""
        return self._position_of(self)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop this request; the scheduler drops its row before the next decode step."""
        self._cancelled.set()

    def touch(self, now: float | None = None) -> None:
        """The engine made progress for this request (a token, or a step while it waits its
        turn): its idle clock starts again."""
        self._progress = time.monotonic() if now is None else now

    def _time_left(self) -> float:
        """Seconds until the first of the two clocks runs out (at least a millisecond)."""
        due = min(self._progress + self.bound.idle_s, self._queued + self.bound.total_s)
        return max(0.001, due - time.monotonic())

    def _expire_if_due(self) -> None:
        """Cancel and fail the request when a clock ran out (a no-op once it is done)."""
        now = time.monotonic()
        over = now >= self._queued + self.bound.total_s
        if over or now >= self._progress + self.bound.idle_s:
            self.fail(timeout_error(self.bound, idle=not over))
            self.cancel()

    def __iter__(self) -> Iterator[str]:
        finished = False
        try:
            while True:
                try:
                    item = self._events.get(timeout=self._time_left())
                except queue.Empty:
                    self._expire_if_due()  # puts the error in the queue when due
                    continue
                if item is _END:
                    finished = True
                    break
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            if not finished:  # the reader went away: nobody wants the rest
                self.cancel()

    def text(self) -> str:
        """Wait for the whole answer and return it (raises the request's error, or
        ``AnswerTimeout`` past the bound)."""
        while not self._done.wait(self._time_left()):
            self._expire_if_due()
        if self.error is not None:
            raise self.error
        return "".join(self._parts)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the request is done (answered, failed or cancelled)."""
        return self._done.wait(timeout)

    def when_done(self, callback) -> None:
        """Call ``callback()`` once the request is done (at once if it already is)."""
        if self.done:
            callback()
        else:
            self._when_done.append(callback)
            if self.done and callback in self._when_done:  # ended meanwhile
                self._when_done.remove(callback)
                callback()

    # -- the engine's side: the writer of the answer ------------------------------------

    def put_text(self, delta: str) -> None:
        self._progress = time.monotonic()
        if delta:
            self._parts.append(delta)
            self._events.put(delta)

    def finish(self, reason: str) -> None:
        if not self.done:
            self.finish_reason = reason
            self._end(_END)

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self._end(error)

    def _end(self, item) -> None:
        self._done.set()
        self._events.put(item)
        while self._when_done:
            try:
                callback = self._when_done.pop()
            except IndexError:
                break
            callback()


def answers_together(submits: list, hashes: list[str]) -> list:
    """Compare's panes: every ``submit()`` in ``submits`` started at once, their texts waited
    for, as :class:`~inference.generate.Answer` objects (one shared wall time, each pane's
    weights hash from ``hashes``). A failed pane cancels the others and raises (ValueError,
    in a sentence, for an engine's failure or timeout)."""
    import time

    from inference.generate import Answer

    start, tickets = time.perf_counter(), []
    try:
        tickets = [submit() for submit in submits]
        texts = [t.text() for t in tickets]
    except ValueError:
        raise
    except Exception as err:  # an engine's failure or timeout, said in a sentence
        raise ValueError(failure_sentence(err)) from err
    finally:
        for ticket in tickets:
            ticket.cancel()  # a failed pane stops the others
    seconds = round(time.perf_counter() - start, 4)
    return [
        Answer(t.adapter, digest, text, t.completion_tokens, seconds, t.finish_reason)
        for t, digest, text in zip(tickets, hashes, texts, strict=True)
    ]
