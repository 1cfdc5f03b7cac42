"""Per-key rate limits: a token bucket for each key, in this process.

``POST /v1/feedback`` takes at most ``TUNEDESK_FEEDBACK_PER_MINUTE`` ratings a minute from one
key (default :data:`FEEDBACK_PER_MINUTE`; a burst of that many, then one every
``60 / limit`` seconds); past it, 429 with ``Retry-After``. Each replica keeps its own
buckets, so behind a balancer a key's limit is per replica.
"""

from __future__ import annotations

import math
import os
import threading
import time

from serve.api_basics import ApiError

FEEDBACK_PER_MINUTE = 60
FEEDBACK_ENV = "TUNEDESK_FEEDBACK_PER_MINUTE"
MAX_KEYS = 10_000  # buckets kept at most; full ones are forgotten first (they say nothing)


def feedback_per_minute() -> float:
    """The feedback route's limit per key, from the environment.

    Raises:
        ValueError: the variable is set to something other than a positive number.
    """
    raw = os.environ.get(FEEDBACK_ENV, "").strip()
    if not raw:
        return float(FEEDBACK_PER_MINUTE)
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or math.isinf(value):
        raise ValueError(
            f"{FEEDBACK_ENV} must be a positive number of ratings per minute, got {raw!r}"
        )
    return value


class RateLimiter:
    """A token bucket per key.

    Args:
        per_minute: tokens refilled per minute; also the bucket's size (the burst allowed).
        clock: seconds, monotonic (tests move it).
    """

    def __init__(self, per_minute: float, clock=time.monotonic):
        self.per_s, self.size, self.clock = per_minute / 60.0, max(1.0, per_minute), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0 when allowed, else the seconds until one is there."""
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(key, (self.size, now))
            tokens = min(self.size, tokens + (now - then) * self.per_s)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return (1.0 - tokens) / self.per_s
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > MAX_KEYS:
                self._forget_full(now)
            return 0.0

    def _forget_full(self, now: float) -> None:
        for key, (tokens, then) in list(self._buckets.items()):
            if tokens + (now - then) * self.per_s >= self.size:
                del self._buckets[key]


def check_feedback_rate(limiter: RateLimiter, key: str) -> None:
    """Take one of ``key``'s ratings from ``limiter``.

    Raises:
        ApiError: 429 with ``Retry-After`` (whole seconds) when the key has none left.
    """
    wait = limiter.take(key)
    if wait:
        raise ApiError(
            429,
            f"too many ratings from this key: at most {limiter.size:g} a minute "
            f"({FEEDBACK_ENV}); try again in {math.ceil(wait)} s",
            "rate_limit_error",
            "rate_limit_exceeded",
            retry_after=math.ceil(wait),
        )
