"""``python -m bench grounded-serving`` end to end on the tiny real-tokenizer llama: /v1 in its
own process on llama-server, plain and grounded answers streamed by the openai package, the
grounded ones shown past answers of a CSV (more prompt tokens), each load's models warmed first
(``--warm``, through ``POST /v1/knowledge/warm``), and the table with the ratios."""

from __future__ import annotations

import argparse
import csv

from llama_run import llama_or_skip

from bench import grounded_serving
from knowledge.grounding import DEFAULT_K

ROWS = [
    ("where is my order", "track_order", "Your order is on its way; track it under My Orders."),
    ("I want a refund", "get_refund", "Refunds reach your card within 5 days of our approval."),
    ("cancel my order", "cancel_order", "Open My Orders and choose Cancel before it ships."),
]


def test_grounded_and_plain_answers_are_timed_side_by_side(
    realtok_dir, tmp_path, monkeypatch, capsys
):
    llama_or_skip()
    data = tmp_path / "pairs.csv"
    with open(data, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["instruction", "intent", "response"])
        out.writerows(ROWS * 2)
        out.writerows(  # the questions asked: distinct, past the rows on the shelf
            (f"{q} (ticket {i})", k, a) for i, (q, k, a) in enumerate(ROWS * 30)
        )
    monkeypatch.setenv("TUNEDESK_HOME", str(tmp_path / "home"))
    parser = argparse.ArgumentParser()
    grounded_serving.add_arguments(parser)
    args = parser.parse_args(
        [
            "--model",
            str(realtok_dir),
            "--data",
            str(data),
            "--shelf-rows",
            "6",
            "--tokens",
            "4",
            "--runs",
            "1",
            "--single-runs",
            "2",
            "--warm",
        ]
    )
    assert grounded_serving.main(args) == 0
    table = capsys.readouterr().out
    assert "TuneDesk answered by: llama.cpp" in table
    assert f"knowledge: 6 past answers of pairs.csv, k={DEFAULT_K}" in table
    plain, grounded = (
        int(table.split(" tokens plain, ")[0].rsplit(" ", 1)[1]),
        int(table.split(" tokens plain, ")[1].split(" ")[0]),
    )
    assert grounded > plain + 20  # the passages are in the grounded prompt
    rows = [line for line in table.splitlines() if line.startswith("| 1") and "x |" in line]
    assert [r.split(" |")[0] for r in rows] == [
        "| 1 client, an adapter",
        "| 16 clients over base + 3 adapters",
    ]
    assert all(r.endswith("| 0 / 0 |") for r in rows)  # no request failed
    # the share of prompt tokens llama-server restored, plain / grounded, as /v1 reports it
    shares = [r.split(" | ")[-2] for r in rows]
    assert all(s.count("%") == 2 for s in shares), shares
    assert "- 16 clients over base + 3 adapters, throughput grounded / plain run by run: " in table
    assert "Goals: first token at 1 client <= 1.5x plain" in table
    # the cache the figures were measured with: memory, and the disk tier below it
    cache = table.split("- llama-server's prompt cache: ")[1].splitlines()[0]
    assert cache.endswith(" MiB on disk beyond it") and " MiB in memory, " in cache, cache
    # --warm: each load's models read the 6 passages first (the tiny model's cache is small)
    assert "- before 1 client, an adapter: warmed bench-a with 6 of 6 passages" in table
    for model in ("base", "bench-a", "bench-b", "bench-c"):
        assert f"- before 16 clients over base + 3 adapters: warmed {model} with 6 of 6" in table
