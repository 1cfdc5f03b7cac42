"""The clients driver on the scheduler of a tiny model: rows, ratios, the alone check."""

from __future__ import annotations

from bench.clients import bench_clients, render_clients
from inference.session import ModelSession
from serve.batching.scheduler import Scheduler


def test_bench_clients_measures_each_count_and_checks_answers_alone(home, varied_dir):
    session = ModelSession(str(varied_dir), dtype="float32")
    with Scheduler(session) as scheduler:
        rows = bench_clients(scheduler.submit, [4], [None], tokens=6)
    assert [r["clients"] for r in rows] == [1, 4]
    assert all(r["errors"] == [] and r["aggregate_tps"] > 0 for r in rows)
    assert rows[0]["speedup"] == 1.0 and rows[1]["ttft_p95_s"] <= rows[1]["full_p95_s"]
    assert rows[1]["identical"] == 4 and rows[1]["partings"] == []
    assert all(len(t) > 0 for t in rows[1]["texts"])
    table = "\n".join(render_clients({"float32": rows}, [None]))
    assert (
        "| float32 | 4 |" in table
        and "| engine |" in table
        and "4/4 checked answers identical" in table
    )


def test_the_api_driver_streams_through_the_openai_client_and_labels_the_engine(home, varied_dir):
    from serve_helpers import put_adapters

    from bench.serving_api import measure_api

    put_adapters(home, varied_dir, names=("a",))
    answered, rows = measure_api(
        varied_dir, home / "adapters", "pytorch", "float32", [3], [None, "a"], tokens=5, check=3
    )
    assert answered.startswith("pytorch float32")
    assert [r["clients"] for r in rows] == [1, 3] and all(r["errors"] == [] for r in rows)
    assert rows[1]["identical"] == 3 and all(t for t in rows[1]["texts"])
    assert rows[1]["aggregate_tps"] == 3 * 5 / rows[1]["wall_s"]
    table = "\n".join(render_clients({answered: rows, "llama.cpp q8_0": rows}, [None, "a"]))
    assert f"- {answered} at 3 clients:" in table and "x llama.cpp q8_0's single stream" in table
