"""The clients driver on the scheduler of a tiny model: rows, ratios, the alone check."""

from __future__ import annotations

from adapters.serve.bench_clients import bench_clients, render_clients
from adapters.serve.scheduler import Scheduler
from adapters.session import ModelSession


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
    assert "| float32 | 4 |" in table and "4/4 answers identical" in table
