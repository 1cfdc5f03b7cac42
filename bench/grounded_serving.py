"""`python -m bench grounded-serving`: what grounding costs a served answer, on llama-server.

TuneDesk's ``/v1`` (``python -m serve --engine llama.cpp``, its own process, as deployed) is
asked the same support questions twice per run, taking turns: once plain and once grounded
(the request's ``knowledge`` field: the best ``--k`` passages of a knowledge base put in the
system message, as Chat and an alias on ``auto`` ground). The knowledge base holds the first
``--shelf-rows`` question/answer pairs of ``--data`` (the Bitext CSV), imported as a support team
imports its past answers. Every client streams with the ``openai`` package, greedy, exactly
``--tokens`` tokens; the adapters are seeded random LoRAs of the default model's shape (the
speed of an answer does not depend on what the weights learned).

Two loads: one client on an adapter (``--single-runs`` requests, one at a time: first-token
time p50 and p95) and 16 clients over the base model and three adapters (``--runs`` runs:
aggregate completion tokens/s, the median run). Every request asks its own question, a
customer question of ``--data`` past the rows on the shelf (plain and grounded the same ones).
A grounded prompt starts from a state llama-server kept only where an earlier request of the
same model was shown the same passage; ``--warm`` first reads the knowledge into the prompt
cache for each model the load asks (``POST /v1/knowledge/warm``, the cache split evenly
between them; the lines it said are in the table's notes). The table gives grounded / plain for
each, the prompt tokens each way, the share of them llama-server restored from its prompt cache
(``usage.prompt_tokens_details.cached_tokens``), and the goals (first token <= 1.5x,
throughput >= 0.8x).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.clients import run_clients
from bench.gateway import summary
from bench.serving import cpu_model, make_adapters, native_bf16, write_section
from bench.serving_api import answered_by, openai_submit, served_in_child
from core import models
from knowledge.grounding import DEFAULT_K

NAMES = ("bench-a", "bench-b", "bench-c")
LOADS = [
    ("1 client, an adapter", 1, [NAMES[0]]),
    ("16 clients over base + 3 adapters", 16, [None, *NAMES]),
]
KNOWLEDGE = "bench-faq"
BITEXT = (
    Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bitext" / "bitext_v1_train.csv"
)
FIRST_TOKEN_GOAL, THROUGHPUT_GOAL = 1.5, 0.8


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="base model name or folder")
    p.add_argument("--data", default=str(BITEXT), help="CSV of question/answer pairs to ground in")
    p.add_argument("--shelf-rows", type=int, default=3000, help="pairs put in the knowledge base")
    p.add_argument("--k", type=int, default=DEFAULT_K, help="passages shown to a grounded answer")
    p.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    p.add_argument("--runs", type=int, default=3, help="runs of the 16-client load, each way")
    p.add_argument(
        "--single-runs", type=int, default=12, help="requests of the one-client load, each way"
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="before each load, read the knowledge into llama-server's prompt cache for each "
        "model it asks (POST /v1/knowledge/warm; the cache split evenly between them)",
    )
    p.add_argument(
        "--write-docs", action="store_true", help="append the table to docs/benchmarks-log.md"
    )


def shelve_knowledge(data: str, rows: int) -> tuple[str, int, list[str]]:
    """The first ``rows`` pairs of ``data`` as knowledge base :data:`KNOWLEDGE`: its version,
    passage count, and the questions of the rows after them (distinct, to ask)."""
    from knowledge.importers import table_passages
    from knowledge.store import KnowledgeShelf

    with open(data, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        table = list(itertools.islice(reader, rows))
        columns = list(reader.fieldnames or [])
        rest = list(reader)
    passages = table_passages(table, columns, Path(data).name)
    version, _ = KnowledgeShelf().add(KNOWLEDGE, passages, [Path(data).name])
    column = next((c for c in ("instruction", "question", "prompt") if c in columns), columns[0])
    asked = list(dict.fromkeys(r[column].strip() for r in rest if (r.get(column) or "").strip()))
    return version.version, len(passages), asked


def prompt_tokens(url: str, extra: dict) -> tuple[int, list]:
    """One non-streamed answer's prompt tokens and the passage ids it was shown (none: [])."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=300)
    got = client.chat.completions.create(
        model=NAMES[0],
        messages=[{"role": "user", "content": "Where is my order? It has not arrived yet."}],
        max_tokens=4,
        temperature=0,
        extra_body=extra,
    )
    grounding = (got.model_extra or {}).get("tunedesk_grounding") or {}
    return got.usage.prompt_tokens, list(grounding.get("passage_ids") or [])


def warm_models(url: str, knowledge: dict, adapters: list) -> list[str]:
    """Each of ``adapters`` (None: the base model) warmed with ``knowledge`` through the API, an
    even share of the cache each; the lines the server said."""
    import httpx

    from core.llama_cpp.binaries import server_binary
    from core.llama_cpp.prompt_cache import kept_mib
    from serve.knowledge_warmup import WARM_SHARE

    # the served child's cache, memory and disk, as its llama-server (with LoRA files) has it
    budget = WARM_SHARE * kept_mib(server_binary()) / len(adapters)
    lines = []
    for adapter in adapters:
        body = {"model": adapter or "base", "knowledge": knowledge, "budget_mib": budget}
        reply = httpx.post(f"{url}/v1/knowledge/warm", json=body, timeout=7200)
        reply.raise_for_status()
        lines += [row["line"] for row in reply.json()["data"]]
    return lines


def measure(
    submits: dict,
    tokens: int,
    runs: int,
    single_runs: int,
    questions: list[str],
    before_load=None,
) -> list[dict]:
    """Each load, plain and grounded taking turns run by run, after one uncounted warm-up each;
    every run of every load asks questions no request asked before (``questions``, in order).
    ``before_load(adapters)``, when given, runs before each load (its lines kept in the row)."""
    rows, asked = [], 0
    for label, clients, adapters in LOADS:
        warmed = before_load(adapters) if before_load else []
        count = single_runs if clients == 1 else runs
        results: dict[str, list] = {name: [] for name in submits}
        for submit in submits.values():
            run_clients(submit, clients, adapters, 4, first_question=asked, questions=questions)
        asked += clients
        before = {name: dict(submit.prompt) for name, submit in submits.items()}
        for run in range(count):
            for name, submit in submits.items():  # both ask the same questions
                results[name].append(
                    run_clients(
                        submit,
                        clients,
                        adapters,
                        tokens,
                        first_ticket=9000 + 100 * run,
                        first_question=asked,
                        questions=questions,
                    )
                )
            asked += clients
        row = {"load": label, "clients": clients, "warmed": warmed}
        if set(submits) == {"plain", "grounded"}:  # each run's ratio: the spread of the median
            row["run_ratios"] = [
                g["aggregate_tps"] / p["aggregate_tps"]
                for p, g in zip(results["plain"], results["grounded"], strict=True)
            ]
        for name in submits:
            clean = [r for r in results[name] if not r["errors"]] or results[name]
            row[name] = {
                **summary(results[name]),
                "ttft_p50_s": statistics.median(t for r in clean for t in r["ttfts"]),
                "errors": [e for r in results[name] for e in r["errors"]],
                "cached_share": cached_share(before[name], submits[name].prompt),
            }
        rows.append(row)
    return rows


def cached_share(before: dict, after) -> float:
    """The share of the prompt tokens read between the two counts that came from the cache."""
    read = after["read"] - before.get("read", 0)
    return (after["cached"] - before.get("cached", 0)) / read if read else 0.0


def render(rows: list[dict], facts: dict, argv: list[str]) -> str:
    plain_tokens, grounded_tokens = facts["prompt_tokens"]
    lines = [
        "## Grounded answers on llama-server, "
        + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "",
        f"- command: `python -m bench grounded-serving {' '.join(argv)}`",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, native bf16: {native_bf16()}",
        f"- TuneDesk answered by: {facts['engine']}; knowledge: {facts['passages']} past answers "
        f"of {Path(facts['data']).name}, k={facts['k']}; a sample question's prompt: "
        f"{plain_tokens} tokens plain, {grounded_tokens} grounded (passages "
        f"{facts['shown']})",
        f"- each answer {facts['tokens']} tokens, greedy; plain and grounded take turns run by "
        "run; tok/s is the median run, first-token times over every request",
        f"- llama-server's prompt cache: {facts['cache_ram_mib']:,} MiB in memory, "
        f"{facts['cache_disk_mib']:,} MiB on disk beyond it",
        "",
        "| load | plain tok/s; TTFT p50 / p95 | grounded tok/s; TTFT p50 / p95 | first token "
        "p50 / p95, grounded / plain | throughput, grounded / plain | prompt tokens from the "
        "cache, plain / grounded | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        plain, grounded = row["plain"], row["grounded"]
        lines.append(
            f"| {row['load']} | {plain['aggregate_tps']:.1f}; {plain['ttft_p50_s']:.3f} / "
            f"{plain['ttft_p95_s']:.3f} s | {grounded['aggregate_tps']:.1f}; "
            f"{grounded['ttft_p50_s']:.3f} / {grounded['ttft_p95_s']:.3f} s | "
            f"{ratio(row, 'ttft_p50_s'):.2f}x / {ratio(row, 'ttft_p95_s'):.2f}x | "
            f"{ratio(row, 'aggregate_tps'):.2f}x | {plain['cached_share']:.0%} / "
            f"{grounded['cached_share']:.0%} | {len(plain['errors'])} / "
            f"{len(grounded['errors'])} |"
        )
    for row in rows:
        for line in row.get("warmed") or []:
            lines.append(f"- before {row['load']}: {line}")
    for row in rows:
        if row.get("run_ratios"):
            each = ", ".join(f"{r:.2f}" for r in row["run_ratios"])
            lines.append(f"- {row['load']}, throughput grounded / plain run by run: {each}")
    single, many = rows[0], rows[-1]
    lines += [
        "",
        f"Goals: first token at 1 client <= {FIRST_TOKEN_GOAL}x plain (p50 "
        f"{ratio(single, 'ttft_p50_s'):.2f}x); 16 mixed clients >= {THROUGHPUT_GOAL}x plain "
        f"throughput ({ratio(many, 'aggregate_tps'):.2f}x).",
    ]
    return "\n".join(lines) + "\n"


def ratio(row: dict, key: str) -> float:
    return row["grounded"][key] / row["plain"][key]


def main(args) -> int:
    from core.llama_cpp.binaries import missing_reason, server_binary
    from core.llama_cpp.prompt_cache import cache_ram_mib, disk_mib

    if server_binary() is None:
        raise RuntimeError(missing_reason())
    if not Path(args.data).is_file():
        raise SystemExit(f"no data file at {args.data} (--data: a CSV of question/answer pairs)")
    argv = [
        f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k in ("shelf_rows", "k", "tokens", "runs", "single_runs")
    ] + (["--warm"] if args.warm else [])
    resolved = models.resolve(args.model)
    with tempfile.TemporaryDirectory(prefix="tunedesk-grounded-") as tmp:
        home = Path(tmp)
        os.environ["TUNEDESK_HOME"] = str(home)
        make_adapters(home / "adapters", resolved, NAMES)
        version, passages, questions = shelve_knowledge(args.data, args.shelf_rows)
        needed = 2 + args.single_runs + 16 * (args.runs + 1)
        if len(questions) < needed:
            raise SystemExit(
                f"{args.data} has {len(questions)} distinct questions past the first "
                f"{args.shelf_rows} rows; {needed} are needed (lower --shelf-rows or --runs)"
            )
        extra = {"knowledge": {"name": KNOWLEDGE, "version": version, "k": args.k}}
        with served_in_child(resolved.path, home, "llama.cpp", "float32") as url:
            deadline = time.time() + 600
            while not answered_by(url).startswith("llama.cpp") and time.time() < deadline:
                time.sleep(1)
            plain_tokens, _ = prompt_tokens(url, {})
            grounded_tokens, shown = prompt_tokens(url, extra)
            if not shown:
                raise RuntimeError("the grounded request was shown no passage: nothing to measure")
            submits = {"plain": openai_submit(url), "grounded": openai_submit(url, extra)}
            before = None
            if args.warm:
                knowledge = {"name": KNOWLEDGE, "version": version}
                before = lambda adapters: warm_models(url, knowledge, adapters)  # noqa: E731
            rows = measure(submits, args.tokens, args.runs, args.single_runs, questions, before)
            facts = {
                "engine": answered_by(url),
                "prompt_tokens": (plain_tokens, grounded_tokens),
                "shown": shown,
                "passages": passages,
                "data": args.data,
                "k": args.k,
                "tokens": args.tokens,
                "cache_ram_mib": cache_ram_mib(),
                "cache_disk_mib": disk_mib(server_binary()),
            }
    text = render(rows, facts, argv)
    print(text)
    if args.write_docs:
        write_section(text)
    return 0
