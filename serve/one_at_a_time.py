"""A bounded queue and one worker thread: the part single-stream engines share.

Requests are answered in arrival order, one at a time. A request's :class:`Ticket` says its
place in the queue (1 = next) and streams its text; a full queue refuses at ``submit``.
"""

from __future__ import annotations

import threading
from collections import deque

from serve.interface.ticket import ServerBusy, Ticket


class OneAtATime:
    """Base class: subclasses implement ``_answer(ticket, *job)``; the worker calls it."""

    name = "engine"

    def __init__(self, *, max_queue: int = 64):
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._waiting: deque = deque()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"tunedesk-{self.name}")
        self._thread.start()

    def status(self) -> dict:
        return {"engine": self.name, "running": int(self._busy), "waiting": len(self._waiting)}

    def close(self) -> None:
        """Stop the worker; waiting requests fail with a clear error."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _enqueue(self, ticket: Ticket, *job) -> Ticket:
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the {self.name} engine is closed")
            if len(self._waiting) >= self.max_queue:
                raise ServerBusy(f"server busy: {len(self._waiting)} requests are already waiting; "
                                 "try again in a moment")
            self._waiting.append((ticket, job))
            self._cond.notify()
        return ticket

    def _position(self, ticket: Ticket) -> int:
        with self._cond:
            return next((i for i, (t, _) in enumerate(self._waiting, 1) if t is ticket), 0)

    _busy = False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    for ticket, _ in self._waiting:
                        ticket.fail(RuntimeError(f"the {self.name} engine was closed"))
                    return
                ticket, job = self._waiting.popleft()
                self._busy = True
            try:
                if not ticket.cancelled:
                    self._answer(ticket, *job)
            except Exception as err:  # the client sees it; the worker goes on
                ticket.fail(err)
            finally:
                self._busy = False
                ticket.finish("cancelled")  # no-op when it finished normally

    def _answer(self, ticket: Ticket, *job) -> None:
        raise NotImplementedError
