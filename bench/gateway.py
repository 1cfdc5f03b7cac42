"""``python -m bench gateway``: TuneDesk's ``/v1`` beside llama.cpp's own llama-server, same run.

Both serve the same files: the default model as a Q8_0 GGUF and three LoRA GGUFs (r=16, every
projection) converted by TuneDesk's export code. The baseline is a bare llama-server started here
the way a user would (``-np 16 -c 16384 -t <cores> --lora a,b,c --lora-init-without-apply``), from
the build TuneDesk runs (``make llama``: a saved prompt state is restored only for the adapters it
was read with, so both keep llama-server's prompt cache in host memory), asked through its own
``/v1/chat/completions`` with ``"lora": [{"id": i, "scale": 1}]``. TuneDesk is ``python -m serve
--engine auto`` (as ``make run`` starts it; ``--engine`` another) in its own process; the table says
which engine answered. Every client streams with the ``openai`` package, asks its own support
question, greedy, exactly ``--tokens`` tokens; the loads run one after the other, each on a quiet
pair, the two servers taking turns run by run. Each load is first run once on each server, not
counted (a llama-server slot that never served computes the prompt's common prefix, the system
prompt, that a used slot keeps). A one-client run is one request: those loads take ``--single-runs``
runs so their p95 is not simply the slowest of five. The table gives aggregate completion tokens/s
and the first-token p95 of each, their ratios, and whether the greedy answers were the same text.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.clients import run_clients, same_as_alone
from bench.serving import cpu_model, make_adapters, native_bf16
from bench.serving_api import answered_by, openai_submit, served_in_child
from core import models

LOADS = [
    ("1 client, base", 1, "base"),
    ("1 client, an adapter", 1, "one"),
    ("4 clients over base + 3 adapters", 4, "mixed"),
    ("16 clients, all on one adapter", 16, "one"),
    ("16 clients over base + 3 adapters", 16, "mixed"),
]
NAMES = ("bench-a", "bench-b", "bench-c")


def llama_server_submit(url: str, lora_ids: dict, key: str = "bench"):
    """A submit callable for the bare llama-server (``key``: its ``--api-key``): the adapter as
    its LoRA id in the request."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)

    def submit(messages, adapter, settings):
        loras = [
            {"id": i, "scale": 1.0 if name == adapter else 0.0} for name, i in lora_ids.items()
        ]
        stream = client.chat.completions.create(
            model="bench",
            messages=messages,
            stream=True,
            temperature=0,
            max_tokens=settings.max_new_tokens,
            extra_body={
                "lora": loras,
                "ignore_eos": settings.min_new_tokens >= settings.max_new_tokens,
            },
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return submit


def _adapters(kind: str) -> list:
    return {"base": [None], "one": [NAMES[0]], "mixed": [None, *NAMES]}[kind]


def measure(
    submits: dict, tokens: int, runs: int, alone: bool = True, single_runs: int | None = None
) -> list[dict]:
    """Each load on the servers in turn, run by run (A B A B ...: both see the machine as it is
    then), summed up by :func:`summary`; answers compared. A one-client run is one request, so
    those loads take ``single_runs`` runs (default ``runs``): a p95 over five requests is their
    slowest one."""
    rows = []
    for label, clients, kind in LOADS:
        load_runs = single_runs if clients == 1 and single_runs else runs
        row = {"load": label}
        results: dict[str, list] = {name: [] for name in submits}
        for submit in submits.values():  # warm-up, not counted: the load itself, 4 tokens each
            # (llama-server's slots keep the common prompt prefix; a slot never used computes it)
            run_clients(submit, clients, _adapters(kind), 4)
            seen = getattr(submit, "engines", None)
            if seen is not None:
                seen.clear()
        for run in range(load_runs):
            for name, submit in submits.items():
                results[name].append(
                    run_clients(
                        submit, clients, _adapters(kind), tokens, first_ticket=9000 + 100 * run
                    )
                )
        for name, submit in submits.items():
            row[name] = summary(results[name])
            row[f"{name} failed"] = [e for r in results[name] for e in r["errors"]]
            row[f"{name} engines"] = dict(getattr(submit, "engines", None) or {})
            row[f"{name} texts"] = results[name][0][
                "texts"
            ]  # run 0 asked both servers the same questions
        if len(submits) == 2:
            ours, theirs = (results[name] for name in submits)
            row["run ratios"] = [
                a["aggregate_tps"] / b["aggregate_tps"] for a, b in zip(ours, theirs, strict=True)
            ]
        row["same_text"] = sum(
            a == b for a, b in zip(row["tunedesk texts"], row["llama-server texts"], strict=True)
        )
        if alone and clients > 1:  # does the load change an answer? each request again, alone
            row["alone"] = same_as_alone(
                submits["tunedesk"], row["tunedesk"], _adapters(kind), tokens, clients
            )
        rows.append(row)
    return rows


def summary(results: list[dict]) -> dict:
    """One server's runs of a load: the median aggregate tokens/s of the runs without an error
    (all runs if every one had one) and the p95 of every request's first token over them."""
    clean = [r for r in results if not r["errors"]] or results
    ttfts = sorted(t for r in clean for t in r["ttfts"])
    return {
        "aggregate_tps": statistics.median(r["aggregate_tps"] for r in clean),
        "ttft_p95_s": ttfts[min(len(ttfts) - 1, round(0.95 * len(ttfts) + 0.5) - 1)],
        "texts": results[0]["texts"],
        "messages": results[0]["messages"],
        "runs": len(clean),
    }


def _run_ratios(ratios: list[float]) -> str:
    """Each run's ratio in parentheses, or their range when there are many."""
    if len(ratios) <= 1:
        return ""
    if len(ratios) > 6:
        return f" ({len(ratios)} runs: {min(ratios):.2f}-{max(ratios):.2f})"
    return f" ({', '.join(f'{r:.2f}' for r in ratios)})"


def render(rows: list[dict], argv: list[str], tokens: int) -> str:
    lines = [
        "## TuneDesk /v1 beside llama-server, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"- command: `python -m bench gateway {' '.join(argv)}`",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, native bf16: {native_bf16()}",
        f"- each answer {tokens} tokens, greedy; the two servers take turns run by run; tok/s is "
        "the median of the runs without an error, TTFT p95 over every request of those runs; "
        "errors counted",
        "",
        "| load | TuneDesk tok/s; TTFT p95 | llama-server tok/s; TTFT p95 | aggregate ratio "
        "(each run's) | TTFT p95 ratio | same answers as llama-server | same as alone | errors "
        "(all runs) | TuneDesk answered by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours, theirs = row["tunedesk"], row["llama-server"]
        lines.append(
            f"| {row['load']} | {ours['aggregate_tps']:.1f}; {ours['ttft_p95_s']:.2f} s | "
            f"{theirs['aggregate_tps']:.1f}; {theirs['ttft_p95_s']:.2f} s | "
            f"{ours['aggregate_tps'] / theirs['aggregate_tps']:.2f}x"
            + _run_ratios(row.get("run ratios", []))
            + f" | {ours['ttft_p95_s'] / theirs['ttft_p95_s']:.2f}x | "
            f"{row['same_text']}/{len(ours['texts'])} | "
            + (f"{row['alone']['identical']}/{row['alone']['checked']}" if "alone" in row else "—")
            + f" | {len(row['tunedesk failed'])} / {len(row['llama-server failed'])} | "
            + ", ".join(
                f"{engine} {count}"
                for engine, count in sorted(row.get("tunedesk engines", {}).items())
            )
            + " |"
        )
    failures = [
        f"- {row['load']}, {name}: {error[:300]}"
        for row in rows
        for name in ("tunedesk", "llama-server")
        for error in row.get(f"{name} failed", [])
    ]
    if failures:
        lines += ["", "Errors (over all runs; the table sums up the runs without one):", *failures]
    if "pytorch" in rows[0]:
        lines += [
            "",
            "TuneDesk's PyTorch batching engine (`--engine pytorch`, float32) on the same loads:",
            "",
            "| load | PyTorch tok/s; TTFT p95 | / llama-server aggregate | / llama-server TTFT "
            "p95 |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['load']} | {r['pytorch']['aggregate_tps']:.1f}; "
            f"{r['pytorch']['ttft_p95_s']:.2f} s | "
            f"{r['pytorch']['aggregate_tps'] / r['llama-server']['aggregate_tps']:.2f}x | "
            f"{r['pytorch']['ttft_p95_s'] / r['llama-server']['ttft_p95_s']:.2f}x |"
            for r in rows
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(
        prog="python -m bench gateway", description=__doc__.splitlines()[0]
    )
    parser.formatter_class = DefaultsFormatter  # each flag's default in --help
    parser.add_argument("--model", default="default", help="base model name or folder")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    parser.add_argument(
        "--runs", type=int, default=5, help="runs per load and server, taking turns"
    )
    parser.add_argument(
        "--single-runs",
        type=int,
        default=20,
        help=(
            "runs of the one-client loads (one request each), so their TTFT p95 is not one "
            "request's"
        ),
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "llama.cpp"),
        help="TuneDesk's engine choice (python -m serve --engine)",
    )
    parser.add_argument(
        "--pytorch",
        action="store_true",
        help="also measure TuneDesk's PyTorch batching engine (python -m serve --engine pytorch)",
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="append the table to docs/benchmarks-log.md"
    )
    args = parser.parse_args(argv)
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
    from bench.serving import write_section
    from core.llama_cpp.binaries import missing_reason, server_binary
    from core.llama_cpp.process import LlamaServerProcess
    from inference.session import physical_cores

    binary = server_binary()
    if binary is None:
        raise RuntimeError(missing_reason())
    resolved = models.resolve(args.model)
    with tempfile.TemporaryDirectory(prefix="tunedesk-gateway-") as tmp:
        home = Path(tmp)
        os.environ["TUNEDESK_HOME"] = str(home)
        make_adapters(home / "adapters", resolved, NAMES)
        base = ensure_base_gguf(resolved, "q8_0", home=home)
        loras = [ensure_lora_gguf(n, home=home) for n in NAMES]
        bare = LlamaServerProcess(
            binary,
            base,
            loras,
            slots=16,
            ctx_per_slot=1024,
            threads=physical_cores(),
            log=home / "bare-llama-server.log",
        ).start()
        try:
            with served_in_child(resolved.path, home, args.engine, "float32") as url:
                deadline = time.time() + 600
                while not answered_by(url).startswith("llama.cpp") and time.time() < deadline:
                    time.sleep(1)
                submits = {
                    "tunedesk": openai_submit(url),
                    "llama-server": llama_server_submit(
                        bare.url, dict(zip(NAMES, range(3), strict=True)), bare.api_key
                    ),
                }
                rows = measure(submits, args.tokens, args.runs, single_runs=args.single_runs)
            if args.pytorch:
                with served_in_child(resolved.path, home, "pytorch", "float32") as url:
                    torch_rows = measure(
                        {"tunedesk": openai_submit(url), "llama-server": submits["llama-server"]},
                        args.tokens,
                        args.runs,
                        alone=False,
                        single_runs=args.single_runs,
                    )
                for row, torch_row in zip(rows, torch_rows, strict=True):
                    row["pytorch"] = torch_row["tunedesk"]
        finally:
            bare.stop()
    text = render(rows, argv if argv is not None else [], args.tokens)
    print(text)
    if args.write_docs:
        write_section(text)
    return 0
