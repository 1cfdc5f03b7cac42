"""The auto rule: one stream to the fastest single stream, many to the batching scheduler once
its measured aggregate at that many streams is higher."""

from __future__ import annotations

from serve.engines import Engines, batched_rate

RATES = {"pytorch": 12.0, "llama.cpp": 55.0, "batched x4": 27.0, "batched x16": 67.0}


def test_batched_rate_interpolates_between_measured_stream_counts():
    assert batched_rate(RATES, 1) == 12.0 and batched_rate(RATES, 4) == 27.0
    assert batched_rate(RATES, 10) == 47.0 and batched_rate(RATES, 64) == 67.0
    assert batched_rate({"pytorch": 12.0}, 8) == 0.0  # no scheduler measured: never chosen


class _Ticket:
    done = False


class _Engine:
    def __init__(self, name):
        self.name = name


def test_requests_go_to_the_scheduler_only_where_its_aggregate_wins():
    engines = Engines(session=None, choice="auto")
    llama, scheduler = _Engine("llama.cpp"), _Engine("scheduler")
    engines._engines.update({"llama.cpp": llama, "pytorch": scheduler})
    engines.rates = dict(RATES)
    picks = []
    for _ in range(16):
        picks.append(engines.pick())
        engines._live.append(_Ticket())
    # at 13 streams and more the scheduler's aggregate (> 55 tok/s) beats llama.cpp's one stream
    assert picks == [llama] * 12 + [scheduler] * 4
    engines._live.clear()
    engines.rates["batched x16"] = 50.0  # never better here: everyone queues on llama.cpp
    assert engines.pick() is llama
