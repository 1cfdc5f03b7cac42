"""Kept knowledge warm-ups: read again into the prompt cache whenever a llama-server starts.

llama-server's prompt cache lives in its process, so a warm-up (:mod:`serve.knowledge_warmup`)
is lost when the server goes: the app restarts, or a new local server starts beside the old one
with a longer LoRA list (an adapter trained or imported since). A warm-up asked with ``keep``
(``POST /v1/knowledge/warm``, the default) is kept in the store, one per model or alias name
(the newest request replaces an older one), and replayed in the background each time a server
starts: the first one at start-up, and every replacement. Replays run one at a time and wait for
quiet moments as every warm-up does; one that fails (an alias deleted since, its knowledge gone)
is logged and stays kept, so it runs again once it can.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from core.store.tables import drop_warmup, put_warmup, warmup_rows

log = logging.getLogger(__name__)


class WarmKeeper:
    """The kept warm-ups of one store, and their replay.

    Args:
        store: the store (``core.store.db.Store``) every replica shares.
        run: warms what one kept request body asks (the route's own work); returns its rows.
        check: raises where a request body could not be warmed (a bad field, an unknown model
            or knowledge), before it is kept; None keeps any body.
    """

    def __init__(self, store, run: Callable[[dict], dict], check: Callable[[dict], object] = None):
        self.store, self.run, self.check = store, run, check
        self._lock = threading.Lock()
        self._pending = False  # a server started while a replay was running: run again
        self._running = False
        self.last: list[dict] = []  # what the last replay did: {"model", "lines" | "error"}
        self.replays = 0  # replays finished since this keeper was made

    def keep(self, body: dict) -> None:
        """Keep ``body`` (its ``model`` names it; ``keep`` itself is not stored)."""
        put_warmup(self.store, body["model"], {k: v for k, v in body.items() if k != "keep"})

    def ask(self, body: dict) -> None:
        """Check ``body``, keep it, and replay the kept warm-ups in the background now (the
        Knowledge tab's "Keep warm": the answer does not wait for minutes of warming).

        Raises:
            whatever ``check`` raises for a body that could not be warmed (nothing kept).
        """
        if self.check is not None:
            self.check(body)
        self.keep(body)
        self.replay_soon()

    def forget(self, model: str) -> bool:
        """Forget the warm-up kept for ``model``; whether there was one."""
        return drop_warmup(self.store, model)

    def rows(self) -> list[dict]:
        """The kept warm-ups: ``{"model", "body", "updated"}``."""
        return warmup_rows(self.store)

    @property
    def busy(self) -> bool:
        """Whether a replay is running or asked for (a server started during one)."""
        with self._lock:
            return self._running or self._pending

    def replay_soon(self) -> None:
        """Replay every kept warm-up in the background (again after the running replay, if one
        is running)."""
        with self._lock:
            self._pending = True
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._replay_while_asked, daemon=True, name="tunedesk-warm").start()

    def replay(self) -> list[dict]:
        """Replay every kept warm-up now, in model order: what each did."""
        done = []
        for row in self.rows():
            try:
                result = self.run(row["body"])
                lines = [r["line"] for r in result.get("data", [])]
                done.append({"model": row["model"], "lines": lines})
                log.info("kept warm-up of %s: %s", row["model"], "; ".join(lines))
            except Exception as err:  # kept: it runs again at the next start
                said = str(err)
                done.append({"model": row["model"], "error": said})
                log.warning("kept warm-up of %s did not run: %s", row["model"], said)
        self.last = done
        self.replays += 1
        return done

    def _replay_while_asked(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._running = False
                    return
                self._pending = False
            try:
                self.replay()
            except Exception:  # the store unreachable: the next start tries again
                log.exception("the kept warm-ups could not be read")
