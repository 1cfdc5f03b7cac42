"""Live figures per version, kept in memory by the server process that answered.

For each version (an adapter's name, ``base`` for the base model), the ``/v1`` answers of a
recent window (default 15 minutes, at most :data:`KEEP` answers), whether the request named an
alias or the adapter itself: requests, errors, first-token and full-answer p50 / p95, and
buckets over time for plots; beside them, the thumbs-down rate from the ratings clients gave
that version's weights (``feedback/ratings.jsonl``). Enough to judge a canary by looking at it.
A client that hangs up counts as a request, neither error nor full answer. Chat and Compare in
the pages answer without the API and are not counted; a restart starts from nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from datetime import datetime

WINDOW_S = 900.0
BUCKET_S = 60.0
KEEP = 20_000  # answers per version at most (a busy canary's window is cut, not the memory)


class VersionStats:
    """Each version's recent answers: ``(time, outcome, first token s, full answer s)``.

    Args:
        window_s: how far back the figures reach.
        clock: seconds (``time.time``; tests move it).
    """

    def __init__(self, window_s: float = WINDOW_S, clock=time.time):
        self.window_s, self.clock = window_s, clock
        self._rows: dict[str, deque] = {}
        self._lock = threading.Lock()

    def record(self, version: str, outcome: str, first_token_s: float | None = None,
               total_s: float | None = None) -> None:
        """One answer of ``version``: ``outcome`` is ``ok``, ``error`` or ``cancelled``."""
        with self._lock:
            rows = self._rows.setdefault(version, deque(maxlen=KEEP))
            rows.append((self.clock(), outcome, first_token_s, total_s))

    async def timed(self, version: str, deltas, started: float):
        """``deltas`` passed through, timed from ``started`` (``time.perf_counter``) and
        recorded when the answer ends, fails or is dropped."""
        first, outcome = None, "cancelled"
        try:
            async for delta in deltas:
                if first is None:
                    first = time.perf_counter() - started
                yield delta
            outcome = "ok"
        except Exception:
            outcome = "error"
            raise
        finally:
            self.record(version, outcome, first, time.perf_counter() - started if outcome == "ok" else None)
            await deltas.aclose()  # a hang-up reaches the answer's source now, not at collection

    def counts(self, version: str, since: float = 0.0) -> tuple[int, int]:
        """(requests, errors) of ``version`` in the window, answered at ``since`` or later."""
        since = max(since, self.clock() - self.window_s)
        with self._lock:
            rows = [r[1] for r in self._rows.get(version, ()) if r[0] >= since]
        return len(rows), rows.count("error")

    def summary(self, version: str, bucket_s: float = BUCKET_S) -> dict:
        """The window's figures for ``version`` (zeros and None when it answered nothing)."""
        now = self.clock()
        with self._lock:
            rows = [r for r in self._rows.get(version, ()) if r[0] >= now - self.window_s]
        figures = _figures(rows)
        buckets: dict[int, list] = {}
        for row in rows:
            buckets.setdefault(int((row[0] - now + self.window_s) // bucket_s), []).append(row)
        series = [{"t": round(now - self.window_s + (i + 1) * bucket_s), **_figures(b)}
                  for i, b in sorted(buckets.items())]
        return {**figures, "window_s": self.window_s, "series": series}


def thumbs(ratings: list[dict], adapter: str, version: str, since: float = 0.0) -> dict:
    """Ratings of ``adapter`` at weights ``version`` (given at ``since`` or later): ups,
    downs, and the share of downs."""
    given = [r.get("rating") for r in ratings if r.get("adapter") == adapter and r.get("version") == version
             and (not since or rated_at(r) >= since)]
    ups, downs = given.count("up"), given.count("down")
    return {"thumbs_up": ups, "thumbs_down": downs,
            "thumbs_down_rate": round(downs / (ups + downs), 4) if ups + downs else None}


def thumbs_series(ratings: list[dict], adapter: str, version: str, since: float, bucket_s: float) -> list[dict]:
    """The thumbs-down rate of ``adapter`` at ``version`` per ``bucket_s`` from ``since`` on, for
    plots: ``[{"t", "thumbs_down_rate"}]`` (buckets without ratings left out)."""
    buckets: dict[int, list[str]] = {}
    for row in ratings:
        at = rated_at(row)
        if row.get("adapter") == adapter and row.get("version") == version and at >= since:
            buckets.setdefault(int((at - since) // bucket_s), []).append(row.get("rating"))
    return [{"t": round(since + (i + 1) * bucket_s), "thumbs_down_rate": round(got.count("down") / len(got), 4)}
            for i, got in sorted(buckets.items())]


def rated_at(row: dict) -> float:
    """When a rating was given, in seconds since the epoch (its ``created``, local time); 0 unknown."""
    try:
        return datetime.fromisoformat(str(row.get("created"))).timestamp()
    except ValueError:
        return 0.0


def _figures(rows: list[tuple]) -> dict:
    errors = sum(1 for r in rows if r[1] == "error")
    first = sorted(r[2] for r in rows if r[2] is not None)
    total = sorted(r[3] for r in rows if r[3] is not None)
    return {"requests": len(rows), "errors": errors,
            "error_rate": round(errors / len(rows), 4) if rows else None,
            "first_token_p50_s": _quantile(first, 0.5), "first_token_p95_s": _quantile(first, 0.95),
            "answer_p50_s": _quantile(total, 0.5), "answer_p95_s": _quantile(total, 0.95)}


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values`` (None when there are none)."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))], 4)
