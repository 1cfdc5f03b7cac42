"""Live figures per version: each /v1 answer's outcome and timings.

For each version (an adapter's name, ``base`` for the base model), the ``/v1`` answers of a
recent window (default 15 minutes), whether the request named an alias or the adapter itself:
requests, errors, first-token and full-answer p50 / p95, and buckets over time for plots
(relayed tool-calling answers too: a whole one's first token is not known, so only streamed
ones give it);
beside them, the thumbs-down rate from the ratings clients gave that version's weights (the
store's ratings, each answer counted once). Enough to judge a canary by looking at it. A
client that hangs up counts as a request, neither error nor full answer. Chat and Compare in
the pages answer without the API and are not counted.

With a store (the server's and the app's), the outcomes go to its ``answer_stats`` table, so
every replica sharing the store sees the same figures and a restart keeps them: each answer is
queued in memory when it ends and written by a writer thread shortly after, never on the token
path. Without one (tests, tools), they stay in this process's memory (at most :data:`KEEP` per
version).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from datetime import datetime

from core.store.tables import outcome_rows, put_outcomes

WINDOW_S = 900.0
BUCKET_S = 60.0
KEEP = 20_000  # answers per version at most (a busy canary's window is cut, not the memory)
FLUSH_AFTER_S = 0.5  # an answer's outcome reaches the store this long after it ended, at most
PRUNE_AFTER_S = 86_400.0  # outcomes older than a day leave the store
log = logging.getLogger("tunedesk.serve")


class VersionStats:
    """Each version's recent answers: ``(time, outcome, first token s, full answer s)``.

    Args:
        window_s: how far back the figures reach.
        clock: seconds (``time.time``; tests move it).
        store: the :class:`core.store.db.Store` the outcomes go to and are read from (None:
            this process's memory only).
    """

    def __init__(self, window_s: float = WINDOW_S, clock=time.time, store=None):
        self.window_s, self.clock, self.store = window_s, clock, store
        self._rows: dict[str, deque] = {}
        self._pending: list[tuple] = []
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._pruned = 0.0
        self._lock = threading.Lock()

    def record(
        self,
        version: str,
        outcome: str,
        first_token_s: float | None = None,
        total_s: float | None = None,
    ) -> None:
        """One answer of ``version``: ``outcome`` is ``ok``, ``error`` or ``cancelled``."""
        row = (self.clock(), outcome, first_token_s, total_s)
        with self._lock:
            if self.store is None:
                self._rows.setdefault(version, deque(maxlen=KEEP)).append(row)
                return
            self._pending.append((version, *row))
            if self._writer is None:  # one writer thread, so one store connection, for good
                self._writer = threading.Thread(
                    target=self._write_on, name="version-stats", daemon=True
                )
                self._writer.start()
        self._wake.set()

    def _write_on(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(FLUSH_AFTER_S)  # gathers the answers ending meanwhile into one write
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write the queued outcomes to the store now (a failure is logged, never raised)."""
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows or self.store is None:
            return
        try:
            put_outcomes(self.store, rows)
            if rows[-1][1] - self._pruned > 600:
                self._pruned = rows[-1][1]
                self.store.execute(
                    "DELETE FROM answer_stats WHERE at < ?", (rows[-1][1] - PRUNE_AFTER_S,)
                )
        except Exception:  # figures lost must not fail an answer
            log.exception(
                "version stats: %d outcomes could not be written to %s", len(rows), self.store
            )

    def rows(self, version: str, since: float) -> list[tuple]:
        """``(time, outcome, first token s, full answer s)`` of ``version`` from ``since`` on."""
        if self.store is None:
            with self._lock:
                return [r for r in self._rows.get(version, ()) if r[0] >= since]
        self.flush()
        return outcome_rows(self.store, version, since)

    async def timed(self, version: str, deltas, started: float, whole=None, not_counted=()):
        """``deltas`` passed through, timed from ``started`` (``time.perf_counter``) and
        recorded when the answer ends, fails or is dropped. ``whole``: says, once ``deltas``
        ended, whether the answer came whole (a relayed stream can end without its finish:
        an error event, an upstream gone); not whole is an error. ``not_counted``: exception
        classes that are the asker's doing (a prompt too long), not the version's: an answer
        failing with one is not recorded at all."""
        first, outcome = None, "cancelled"
        try:
            async for delta in deltas:
                if first is None:
                    first = time.perf_counter() - started
                yield delta
            outcome = "ok" if whole is None or whole() else "error"
        except Exception as err:
            outcome = None if isinstance(err, not_counted) else "error"
            raise
        finally:
            if outcome is not None:
                total = time.perf_counter() - started if outcome == "ok" else None
                self.record(version, outcome, first, total)
            await deltas.aclose()  # a hang-up reaches the answer's source now, not at collection

    def counts(self, version: str, since: float = 0.0) -> tuple[int, int]:
        """(requests, errors) of ``version`` in the window, answered at ``since`` or later."""
        rows = [r[1] for r in self.rows(version, max(since, self.clock() - self.window_s))]
        return len(rows), rows.count("error")

    def summary(self, version: str, bucket_s: float = BUCKET_S) -> dict:
        """The window's figures for ``version`` (zeros and None when it answered nothing)."""
        now = self.clock()
        rows = self.rows(version, now - self.window_s)
        figures = _figures(rows)
        buckets: dict[int, list] = {}
        for row in rows:
            buckets.setdefault(int((row[0] - now + self.window_s) // bucket_s), []).append(row)
        series = [
            {"t": round(now - self.window_s + (i + 1) * bucket_s), **_figures(b)}
            for i, b in sorted(buckets.items())
        ]
        return {**figures, "window_s": self.window_s, "series": series}


def latest_per_answer(
    ratings: list[dict], adapter: str, version: str, since: float = 0.0
) -> list[dict]:
    """The ratings of ``adapter`` at weights ``version`` (given at ``since`` or later), one per
    answer rated: its latest. However many raters or ratings an answer got, it counts once."""
    latest: dict[str, dict] = {}
    for i, row in enumerate(ratings):  # oldest first: a later rating of an answer replaces it here
        mine = row.get("adapter") == adapter and row.get("version") == version
        if mine and (not since or rated_at(row) >= since):
            latest[str(row.get("answer_id") or row.get("id") or f"#{i}")] = row
    return list(latest.values())


def thumbs(ratings: list[dict], adapter: str, version: str, since: float = 0.0) -> dict:
    """Distinct answers of ``adapter`` at weights ``version`` rated (at ``since`` or later), each
    by its latest rating: ups, downs, and the share of downs."""
    given = [r.get("rating") for r in latest_per_answer(ratings, adapter, version, since)]
    ups, downs = given.count("up"), given.count("down")
    return {
        "thumbs_up": ups,
        "thumbs_down": downs,
        "thumbs_down_rate": round(downs / (ups + downs), 4) if ups + downs else None,
    }


def thumbs_series(
    ratings: list[dict], adapter: str, version: str, since: float, bucket_s: float
) -> list[dict]:
    """The thumbs-down rate of ``adapter`` at ``version`` per ``bucket_s`` from ``since`` on, for
    plots, over distinct answers as :func:`thumbs` counts them: ``[{"t", "thumbs_down_rate"}]``
    (buckets without ratings left out)."""
    buckets: dict[int, list[str]] = {}
    for row in latest_per_answer(ratings, adapter, version, since):
        buckets.setdefault(int((rated_at(row) - since) // bucket_s), []).append(row.get("rating"))
    return [
        {
            "t": round(since + (i + 1) * bucket_s),
            "thumbs_down_rate": round(got.count("down") / len(got), 4),
        }
        for i, got in sorted(buckets.items())
    ]


def rated_at(row: dict) -> float:
    """When a rating was given, in seconds since the epoch (its ``created``, local
    time); 0 unknown."""
    try:
        return datetime.fromisoformat(str(row.get("created"))).timestamp()
    except ValueError:
        return 0.0


def _figures(rows: list[tuple]) -> dict:
    errors = sum(1 for r in rows if r[1] == "error")
    first = sorted(r[2] for r in rows if r[2] is not None)
    total = sorted(r[3] for r in rows if r[3] is not None)
    return {
        "requests": len(rows),
        "errors": errors,
        "error_rate": round(errors / len(rows), 4) if rows else None,
        "first_token_p50_s": _quantile(first, 0.5),
        "first_token_p95_s": _quantile(first, 0.95),
        "answer_p50_s": _quantile(total, 0.5),
        "answer_p95_s": _quantile(total, 0.95),
    }


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values`` (None when there are none)."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))], 4)
