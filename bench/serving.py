"""Benchmark of the model session on the real default model: ``python -m bench serving``.

Measures adapter switch and load latency, time to first token and decode speed of a
128-token greedy answer, and the cost of a two-pane compare (base + adapter in one batched
call) relative to one answer of the same length. Prints a markdown section; ``--write-docs``
appends it to ``docs/benchmarks-log.md``. Two random LoRA adapters (r=16 on every attention and
MLP projection) are written to a temporary shelf first, so the user's shelf is untouched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from adapters.shelf.manifest import FORMAT
from core import models
from core.hashing import file_hash
from inference.generate import GenerationSettings, compare, encode
from inference.packed_linears import ENV
from inference.session import WEIGHTS, ModelSession, physical_cores

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MSGS = [{"role": "user", "content": "Where is my order? I ordered a blue jacket last week."}]
ANSWER_TOKENS = 128
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks-log.md"
HEADING = "## Adapter session (issue 5)"
LINEARS_LABEL = {"all": "", "head": " (packed output layer only)", "off": " (no packed linears)"}


def make_adapters(
    shelf: Path, resolved: models.ResolvedModel, names=("bench-a", "bench-b")
) -> None:
    """Save seeded random LoRA adapters (r=16, all projections) with manifests on ``shelf``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    for seed, name in enumerate(names, start=1):
        torch.manual_seed(seed)
        config = LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, init_lora_weights=False)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(resolved.path), config)
        model.save_pretrained(shelf / name)
        manifest = {
            "format": FORMAT,
            "name": name,
            "adapter_hash": file_hash(shelf / name / WEIGHTS),
            "base_model": {
                "name": resolved.name,
                "architecture": resolved.architecture,
                "weight_hash": resolved.weight_hash,
            },
        }
        (shelf / name / "manifest.json").write_text(json.dumps(manifest))
        del model


def time_switch(session: ModelSession, a: str, b: str, n: int = 50) -> tuple[float, float]:
    """Median seconds of ``activate`` between two loaded adapters, and of PEFT set_adapter."""
    session.load_adapter(a)
    session.load_adapter(b)
    switch, peft_set = [], []
    for i in range(n):
        name = a if i % 2 else b
        start = time.perf_counter()
        session.activate(name)
        switch.append(time.perf_counter() - start)
        start = time.perf_counter()
        with session.use(name):  # flips PEFT's active adapter (what plain forward passes see)
            peft_set.append(time.perf_counter() - start)
    return statistics.median(switch), statistics.median(peft_set)


def time_load(session: ModelSession, name: str, keep: str, n: int = 5) -> float:
    """Median seconds to load ``name`` from disk while ``keep`` stays loaded."""
    session.load_adapter(keep)
    times = []
    for _ in range(n):
        session.unload_adapter(name)
        start = time.perf_counter()
        session.load_adapter(name)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class _Clock:
    """A streamer for ``generate`` that only notes when each token arrives."""

    def __init__(self):
        self.stamps: list[float] = []

    def put(self, value) -> None:
        self.stamps.append(time.perf_counter())  # first call: the prompt; then one per token

    def end(self) -> None:
        pass


def time_answer(session: ModelSession, adapter: str | None, runs: int = 3) -> tuple[float, float]:
    """Median time to first token (s) and decode tokens/s of a 128-token greedy answer."""
    tok = session.tokenizer
    inputs = encode(session, [MSGS])
    ttft, speed = [], []
    for _ in range(runs):
        clock, start = _Clock(), time.perf_counter()
        session.generate(
            inputs,
            [adapter],
            max_new_tokens=ANSWER_TOKENS,
            min_new_tokens=ANSWER_TOKENS,
            do_sample=False,
            streamer=clock,
            pad_token_id=tok.pad_token_id,
        )
        first, last = clock.stamps[1], clock.stamps[-1]
        ttft.append(first - start)
        speed.append((len(clock.stamps) - 2) / (last - first))
    return statistics.median(ttft), statistics.median(speed)


def time_compare(session: ModelSession, adapter: str, runs: int = 5) -> tuple[float, float, float]:
    """Median seconds of one answer and of a base + adapter compare (equal lengths), and the
    median ratio of each compare to the answer timed just before it (paired, so a slow
    minute on a shared machine slows both sides of a pair)."""
    settings = GenerationSettings(max_new_tokens=ANSWER_TOKENS, min_new_tokens=ANSWER_TOKENS)
    one, two = [], []
    for _ in range(runs):
        one.append(compare(session, MSGS, [adapter], settings)[0].seconds)
        two.append(compare(session, MSGS, [None, adapter], settings)[0].seconds)
    ratio = statistics.median(b / a for a, b in zip(one, two, strict=True))
    return statistics.median(one), statistics.median(two), ratio


def measure(dtype: str, shelf: Path, resolved: models.ResolvedModel) -> dict:
    """Every number for one weight dtype."""
    session = ModelSession(str(resolved.path), dtype=dtype, adapters_dir=shelf)
    session.load()
    _, plain_tps = time_answer(session, None)  # before any adapter: the plain transformers model
    start = time.perf_counter()
    session.load_adapter("bench-a")  # the first adapter also wraps the base in a PeftModel
    first_load = time.perf_counter() - start
    out = {
        "dtype": session.dtype,
        "threads": session.threads,
        "first_adapter_load_s": first_load,
        "base_load_s": session.status()["load_seconds"],
        "decode_plain_tps": plain_tps,
    }
    steps = [
        (("switch_s", "peft_set_adapter_s"), lambda: time_switch(session, "bench-a", "bench-b")),
        (("adapter_load_s",), lambda: (time_load(session, "bench-b", keep="bench-a"),)),
        (("ttft_base_s", "decode_base_tps"), lambda: time_answer(session, None)),
        (("ttft_adapter_s", "decode_adapter_tps"), lambda: time_answer(session, "bench-a")),
        (("one_answer_s", "compare_s", "compare_ratio"), lambda: time_compare(session, "bench-a")),
    ]
    for keys, run in steps:
        out.update(zip(keys, run(), strict=True))
        print(f"[{session.dtype}] " + ", ".join(f"{k}={out[k]:.4g}" for k in keys), file=sys.stderr)
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def render(results: list[dict], argv: list[str], load: tuple[tuple, tuple]) -> str:
    """The markdown section: setup lines, then one column per dtype with the goals."""
    import peft
    import torch
    import transformers

    def ms(key):
        return lambda r: f"{r[key] * 1000:.1f} ms"

    rows = [
        (
            "adapter switch: `activate`, median of 50",
            ms("switch_s"),
            "< 10 ms",
            lambda r: r["switch_s"] < 0.010,
        ),
        (
            "↳ for reference: PEFT `set_adapter` via `session.use`",
            ms("peft_set_adapter_s"),
            "",
            None,
        ),
        (
            "adapter load from disk, median of 5",
            ms("adapter_load_s"),
            "< 300 ms",
            lambda r: r["adapter_load_s"] < 0.300,
        ),
        (
            "↳ first adapter (wraps the base in a PeftModel), once",
            ms("first_adapter_load_s"),
            "",
            None,
        ),
        ("base model load", lambda r: f"{r['base_load_s']:.2f} s", "", None),
        (
            "time to first token, base / adapter",
            lambda r: f"{r['ttft_base_s'] * 1000:.0f} / {r['ttft_adapter_s'] * 1000:.0f} ms",
            "",
            None,
        ),
        (
            "decode speed, base / adapter (128-token greedy answer)",
            lambda r: f"{r['decode_base_tps']:.1f} / {r['decode_adapter_tps']:.1f} tok/s",
            ">= 30 tok/s",
            lambda r: min(r["decode_base_tps"], r["decode_adapter_tps"]) >= 30,
        ),
        (
            "↳ for reference: decode before any adapter is loaded (plain model)",
            lambda r: f"{r['decode_plain_tps']:.1f} tok/s",
            "",
            None,
        ),
        ("one answer (adapter, 128 tokens)", lambda r: f"{r['one_answer_s']:.2f} s", "", None),
        (
            "two-pane compare (base + adapter, one batched call); ratio: median of 5 pairs",
            lambda r: f"{r['compare_s']:.2f} s = {r['compare_ratio']:.2f}x",
            "< 1.3x",
            lambda r: r["compare_ratio"] < 1.3,
        ),
    ]
    head = "| measure | " + " | ".join(f"{r['dtype']}, {r['threads']} threads" for r in results)
    lines = [
        HEADING,
        "",
        f"- command: `{' '.join(['python -m bench serving', *argv])}`",
        f"- machine: {cpu_model()}, {physical_cores()} physical cores, {os.cpu_count()} logical "
        f"CPUs; native bf16: {native_bf16()}; load average {load[0][0]:.1f} at start, "
        f"{load[1][0]:.1f} at end (other jobs share these cores)",
        f"- software: Python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, peft {peft.__version__}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}; model {models.DEFAULT_MODEL}; "
        "adapters: random LoRA r=16 on q,k,v,o,gate,up,down",
        "",
        head + " | goal |",
        "|---" * (len(results) + 2) + "|",
    ]
    for label, show, goal, ok in rows:
        cells = [show(r) + ("" if ok is None else (" ✅" if ok(r) else " ❌")) for r in results]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {goal} |")
    return "\n".join(lines) + "\n"


def write_section(text: str, doc: Path = DOC) -> None:
    """Append the section to ``docs/benchmarks-log.md`` (created with a top heading if missing)."""
    doc.parent.mkdir(parents=True, exist_ok=True)
    old = doc.read_text() if doc.is_file() else "# Benchmarks\n"
    doc.write_text(old.rstrip("\n") + "\n\n" + text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(prog="python -m bench serving", description=__doc__)
    parser.formatter_class = DefaultsFormatter  # each flag's default in --help
    parser.add_argument("--model", default="default", help="base model name or folder")
    parser.add_argument(
        "--dtypes",
        default="auto,float32",
        help="comma-separated weight dtypes to measure (auto: bf16 where native)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"append the section to {DOC}")
    parser.add_argument(
        "--clients",
        default="",
        help="e.g. 1,4,16: concurrent clients through the batching scheduler "
        "instead of the single-answer measures",
    )
    parser.add_argument(
        "--adapters",
        type=int,
        default=3,
        help="with --clients: adapters the clients use beside the base",
    )
    parser.add_argument("--tokens", type=int, default=64, help="with --clients: tokens per answer")
    parser.add_argument(
        "--check",
        type=int,
        default=16,
        help="with --clients: answers of the largest count checked against the same request alone",
    )
    parser.add_argument(
        "--via",
        choices=["api", "scheduler"],
        default="api",
        help="with --clients: through the OpenAI-compatible API with the openai "
        "client (default), or straight into the batching scheduler",
    )
    parser.add_argument(
        "--engines",
        default="pytorch,llama.cpp",
        help="with --clients --via api: serving engines to measure, each behind "
        "its own server (pytorch: the batching scheduler, per --dtypes)",
    )
    parser.add_argument(
        "--server",
        choices=["process", "thread"],
        default="process",
        help="with --clients --via api: the API server in its own process (as "
        "deployed; default) or in a thread of the benchmark's process",
    )
    parser.add_argument(
        "--linears",
        default="all",
        help="with --clients: PyTorch linear layers to measure, comma-separated: "
        "all (every one through oneDNN's packed matmul: what serves), head "
        "(the output layer only) and/or off (F.linear everywhere)",
    )
    args = parser.parse_args(argv)
    if args.clients:
        return run_clients_bench(args, argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    resolved = models.resolve(args.model)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tunedesk-bench-") as tmp:
        shelf = Path(tmp) / "adapters"
        make_adapters(shelf, resolved)
        results = [measure(d, shelf, resolved) for d in args.dtypes.split(",")]
    text = render(results, argv, (load_start, os.getloadavg()))
    print(text)
    if args.write_docs:
        write_section(text)
    return 0


def run_clients_bench(args, argv: list[str]) -> int:
    """``--clients``: aggregate tokens/s, TTFT and full-answer times per client count."""
    from bench.clients import clients_section, measure_scheduler, session_bounds

    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    names = tuple(f"bench-{chr(ord('a') + i)}" for i in range(args.adapters))
    resolved = models.resolve(args.model)
    load_start = os.getloadavg()
    results = {}
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="tunedesk-bench-") as tmp:
        shelf = Path(tmp) / "adapters"
        make_adapters(shelf, resolved, names)
        os.environ["TUNEDESK_HOME"] = tmp  # the API lists and the GGUF cache read this shelf
        for engine, dtype, linears in _runs(args):
            os.environ[ENV] = linears  # read when the run's session loads its model
            if args.via == "scheduler":
                got, rows = measure_scheduler(
                    resolved.path,
                    shelf,
                    dtype,
                    counts,
                    [None, *names],
                    args.tokens,
                    log=log,
                    check=args.check,
                )
            else:
                from bench.serving_api import measure_api

                got, rows = measure_api(
                    resolved.path,
                    shelf,
                    engine,
                    dtype,
                    counts,
                    [None, *names],
                    args.tokens,
                    log=log,
                    check=args.check,
                    server=args.server,
                )
                if engine == "pytorch":  # the server's session is elsewhere: the same one here
                    rows[-1]["bounds"] = session_bounds(
                        resolved.path, dtype, max(counts), args.tokens
                    )
            results[got + LINEARS_LABEL[linears]] = rows
        os.environ.pop(ENV, None)
    load = (load_start, os.getloadavg())
    via = (
        f"the API (server: {args.server}), openai client" if args.via == "api" else "the scheduler"
    )
    setup = [
        f"- command: `{' '.join(['python -m bench serving', *argv])}`",
        f"- machine: {cpu_model()}, {physical_cores()} physical cores; native bf16: "
        f"{native_bf16()}; via {via}"
        f"; load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}; model {models.DEFAULT_MODEL}; "
        "adapters: random LoRA r=16 on q,k,v,o,gate,up,down",
    ]
    text = clients_section(
        "## Many clients at once: continuous batching (issue 23)", setup, results, [None, *names]
    )
    print(text)
    if args.write_docs:
        write_section(text)
    return 0


def _runs(args) -> list[tuple[str, str, str]]:
    """(engine, dtype, packed linears) to measure: PyTorch once per dtype and --linears kind,
    llama.cpp (its GGUF type) once."""
    kinds = [h.strip() for h in args.linears.split(",") if h.strip()]
    if not kinds or set(kinds) - set(LINEARS_LABEL):
        raise SystemExit(f"--linears takes all, head and/or off, got {args.linears!r}")
    engines = ["pytorch"] if args.via == "scheduler" else args.engines.split(",")
    runs = []
    for engine in engines:
        if engine == "llama.cpp":
            runs.append((engine, "float32", "all"))
        else:
            runs += [(engine, d, h) for d in args.dtypes.split(",") for h in kinds]
    return runs


def native_bf16() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return "yes (avx512_bf16)" if "avx512_bf16" in flags else "no"


if __name__ == "__main__":
    sys.exit(main())
