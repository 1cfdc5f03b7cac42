"""The per-key token bucket: a burst of the limit, then one token per 60/limit seconds, each key
on its own."""

from __future__ import annotations

from serve.rate_limit import RateLimiter


def test_a_key_gets_its_burst_then_waits_and_other_keys_are_not_held_back():
    now = [100.0]
    limit = RateLimiter(60, clock=lambda: now[0])
    assert [limit.take("a") for _ in range(60)] == [0.0] * 60
    assert limit.take("a") == 1.0  # empty: the next token comes in a second
    assert limit.take("b") == 0.0
    now[0] += 0.5
    assert limit.take("a") == 0.5
    now[0] += 0.5
    assert limit.take("a") == 0.0 and limit.take("a") > 0
    now[0] += 3600
    assert [limit.take("a") for _ in range(60)] == [0.0] * 60 and limit.take(
        "a"
    ) > 0  # never above the burst
