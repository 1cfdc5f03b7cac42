"""bench/ceiling.py: bounds on batching from the linear layers of a tiny model."""

from __future__ import annotations

import pytest

from bench.ceiling import batching_bounds, render_bounds, unshared_tokens
from bench.clients import bounds_for
from inference.session import ModelSession


def test_unshared_tokens_are_what_follows_the_common_beginning():
    assert unshared_tokens([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == [2, 1, 1]
    assert unshared_tokens([[7, 8], [7, 8]]) == [0, 0]
    assert unshared_tokens([[1], [2, 3]]) == [1, 2]
    assert unshared_tokens([]) == []


def test_bounds_follow_from_the_timed_linears(home, varied_dir):
    session = ModelSession(str(varied_dir), dtype="float32")
    session.load()
    prompts = [[5, 6, 7, 8 + i, 9] for i in range(4)]
    b = batching_bounds(session.model, prompts, tokens=10)
    assert b["clients"] == 4 and b["prompt_tokens"] == 4 * 2
    assert all(b[k] > 0 for k in ("step_1_s", "step_n_s", "prefill_1_s", "prefill_n_s"))
    solo = b["prefill_1_s"] + 10 * b["step_1_s"]
    together = b["prefill_n_s"] + 10 * b["step_n_s"]
    assert b["speedup_max"] == pytest.approx(4 * solo / together)
    assert (
        b["full_ratio_min"] == pytest.approx(together / solo)
        and b["ttft_min_s"] == b["prefill_n_s"]
    )
    # the benchmark's own questions, rendered by the chat template: they share its beginning
    real = bounds_for(session, 3, 8)
    assert real["clients"] == 3 and real["prompt_tokens"] > 0


def test_render_says_which_goals_are_out_of_reach():
    bounds = {
        "clients": 16,
        "step_1_s": 0.0444,
        "step_n_s": 0.099,
        "prompt_tokens": 339,
        "prefill_n_s": 1.06,
        "speedup_max": 6.37,
        "ttft_min_s": 1.06,
        "full_ratio_min": 1.9,
    }
    text = "\n".join(render_bounds(bounds))
    assert "44.4 ms for 1 row and 99.0 ms for 16 rows" in text
    assert "at most 6.37x one stream (goal 8x: **out of reach**)" in text
    assert "at least 1.06 s (goal 1 s: **out of reach**)" in text
    assert "at least 1.90x a solo answer (goal 2x: within reach)" in text


def test_the_clients_table_ends_with_each_engines_bounds(home, varied_dir):
    from bench.clients import bench_clients, render_clients
    from serve.batching.scheduler import Scheduler

    session = ModelSession(str(varied_dir), dtype="float32")
    with Scheduler(session) as scheduler:
        rows = bench_clients(scheduler.submit, [2], [None], tokens=4, check=0)
    rows[-1]["bounds"] = bounds_for(session, 2, 4)
    lines = render_clients({"pytorch float32": rows}, [None])
    at = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("pytorch float32: Bounds from the linear")
    )
    assert lines[at - 1] == "" and lines[at + 2].startswith("- aggregate at 2 clients: at most ")
    assert at > next(i for i, line in enumerate(lines) if line.startswith("Goals at 16 clients"))
