"""Live figures per version: counts, nearest-rank p50/p95 over the window, per-minute buckets,
answers timed as they stream, thumbs-down from ratings of that version's weights."""

from __future__ import annotations

import asyncio

import pytest

from serve.version_stats import VersionStats, thumbs


class Clock:
    def __init__(self, now: float = 10_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_counts_and_percentiles_over_the_window():
    clock = Clock()
    stats = VersionStats(window_s=600, clock=clock)
    stats.record("v3", "ok", 9.0, 99.0)  # falls out of the window below
    clock.now += 700
    for i in range(1, 21):  # first tokens 0.1 .. 2.0 s, answers 1 .. 20 s
        stats.record("v3", "ok", i / 10, float(i))
    stats.record("v3", "error")
    stats.record("v3", "cancelled", 0.5)
    got = stats.summary("v3")
    assert (got["requests"], got["errors"], got["error_rate"]) == (22, 1, round(1 / 22, 4))
    assert (got["first_token_p50_s"], got["first_token_p95_s"]) == (
        1.0,
        1.9,
    )  # 21: the hung-up one too
    assert (got["answer_p50_s"], got["answer_p95_s"]) == (10.0, 19.0)
    assert sum(b["requests"] for b in got["series"]) == 22 and len(got["series"]) == 1
    empty = stats.summary("v4")
    assert empty["requests"] == 0 and empty["answer_p95_s"] is None and empty["series"] == []


def test_buckets_follow_time_for_the_plots():
    clock = Clock()
    stats = VersionStats(window_s=600, clock=clock)
    for minute in range(3):
        for _ in range(minute + 1):
            stats.record("v4", "ok", 0.1, 1.0)
        clock.now += 60
    series = stats.summary("v4", bucket_s=60)["series"]
    assert [b["requests"] for b in series] == [1, 2, 3]
    assert series[0]["t"] < series[1]["t"] < series[2]["t"] <= clock.now


def test_an_answer_is_timed_as_it_streams_and_a_failure_counts_as_an_error():
    stats = VersionStats()

    async def answer(fail: bool):
        yield "Hello"
        await asyncio.sleep(0.05)
        if fail:
            raise RuntimeError("the engine died")
        yield " there"

    async def read(fail: bool):
        import time

        return [d async for d in stats.timed("v4", answer(fail), time.perf_counter())]

    assert asyncio.run(read(False)) == ["Hello", " there"]
    with pytest.raises(RuntimeError):
        asyncio.run(read(True))
    got = stats.summary("v4")
    assert (got["requests"], got["errors"]) == (2, 1)
    assert got["answer_p50_s"] >= 0.05 > got["first_token_p50_s"]


def test_a_client_hanging_up_counts_as_a_request_and_closes_the_source():
    stats, closed = VersionStats(), []

    async def answer():
        try:
            for word in ("a", "b", "c"):
                yield word
        finally:
            closed.append(True)

    async def read_one():
        stream = stats.timed("v3", answer(), 0.0)
        await stream.__anext__()
        await stream.aclose()

    asyncio.run(read_one())
    got = stats.summary("v3")
    assert closed == [True] and (got["requests"], got["errors"], got["answer_p50_s"]) == (
        1,
        0,
        None,
    )


def test_thumbs_count_only_the_versions_own_weights():
    ratings = [
        {"adapter": "v4", "version": "h2", "rating": r} for r in ("up", "down", "down", "up")
    ]
    ratings += [
        {"adapter": "v4", "version": "old", "rating": "down"},
        {"adapter": "v3", "version": "h2", "rating": "down"},
    ]
    assert thumbs(ratings, "v4", "h2") == {
        "thumbs_up": 2,
        "thumbs_down": 2,
        "thumbs_down_rate": 0.5,
    }
    assert thumbs(ratings, "v5", "h5")["thumbs_down_rate"] is None


def test_counts_since_the_split_changed_and_thumbs_over_time():
    from datetime import datetime

    from serve.version_stats import rated_at, thumbs_series

    clock = Clock()
    stats = VersionStats(window_s=600, clock=clock)
    stats.record("v4", "error")
    clock.now += 100
    stats.record("v4", "ok", 0.1, 1.0)
    stats.record("v4", "error")
    assert stats.counts("v4") == (3, 2) and stats.counts("v4", since=clock.now - 50) == (2, 1)
    assert stats.counts("v3") == (0, 0)
    start = datetime(2026, 12, 1, 10, 0, 0).timestamp()
    ratings = [
        {"adapter": "v4", "version": "h", "rating": r, "created": f"2026-12-01T10:00:{s:02d}"}
        for r, s in (("down", 1), ("up", 2), ("down", 12), ("down", 13), ("down", 40))
    ]
    ratings.append({"adapter": "v4", "version": "h", "rating": "down", "created": "not a time"})
    assert rated_at(ratings[0]) == start + 1 and rated_at(ratings[-1]) == 0.0
    assert thumbs(ratings, "v4", "h", since=start + 10) == {
        "thumbs_up": 0,
        "thumbs_down": 3,
        "thumbs_down_rate": 1.0,
    }
    assert thumbs_series(ratings, "v4", "h", start, 10) == [
        {"t": round(start + 10), "thumbs_down_rate": 0.5},
        {"t": round(start + 20), "thumbs_down_rate": 1.0},
        {"t": round(start + 50), "thumbs_down_rate": 1.0},
    ]


def test_with_a_store_the_outcomes_are_written_after_the_answer_and_every_replica_sees_them(home):
    import time

    from core.store.home import open_store
    from core.store.tables import outcome_rows

    store = open_store(home)
    mine, other = VersionStats(store=store), VersionStats(store=store)
    mine.record("v4", "ok", 0.2, 1.0)
    mine.record("v4", "error")
    assert outcome_rows(store, "v4", 0) == []  # queued, not written while the answer ends
    deadline = time.monotonic() + 10
    while not outcome_rows(store, "v4", 0) and time.monotonic() < deadline:
        time.sleep(0.05)  # the writer thread's turn
    assert [r[1] for r in outcome_rows(store, "v4", 0)] == ["ok", "error"]
    assert other.counts("v4") == (2, 1) and other.summary("v4")["first_token_p50_s"] == 0.2
    assert VersionStats(store=open_store(home)).counts("v4") == (2, 1)  # a restart keeps them


def test_a_stream_that_ends_without_its_finish_counts_as_an_error():
    """A relayed stream can end with no finish (an error event, an upstream gone): not whole."""
    import time

    stats = VersionStats()

    async def events():
        yield b"data: {}\n\n"

    async def read(whole: bool):
        timed = stats.timed("v5", events(), time.perf_counter(), whole=lambda: whole)
        return [e async for e in timed]

    asyncio.run(read(True))
    asyncio.run(read(False))
    got = stats.summary("v5")
    assert (got["requests"], got["errors"]) == (2, 1) and got["answer_p50_s"] is not None
