"""llama.cpp beside PyTorch in ``python -m bench serving``: the same model, adapters, prompt
and answer length, in the same run, and the ratios the serving issue asks for.

The base is the GGUF the app serves (``ensure_base_gguf``, q8_0 by default), each bench
adapter its LoRA GGUF (``ensure_lora_gguf``), both converted once and cached.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from inference.generate import GenerationSettings
from serve.llama_engine import LlamaEngine

ANSWER_TOKENS = 128


def measure_llama(resolved, home: Path, msgs: list[dict], outtype: str = "q8_0") -> dict:
    """Every llama.cpp number: decode, first token, LoRA load and switch, a two-answer compare."""
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf

    base = ensure_base_gguf(resolved, outtype)
    loras = {name: ensure_lora_gguf(name, home=home) for name in ("bench-a", "bench-b")}
    engine = LlamaEngine(base, loras.__getitem__, label=f"llama.cpp {outtype}")
    out = {"outtype": outtype, "threads": engine.threads}
    try:
        steps = [(("ttft_base_s", "decode_base_tps"), lambda: time_answer(engine, msgs, None)),
                 (("ttft_adapter_s", "decode_adapter_tps"), lambda: time_answer(engine, msgs, "bench-a")),
                 (("adapter_load_s",), lambda: (time_load(engine, loras["bench-b"]),)),
                 (("switch_s",), lambda: (time_switch(engine, loras["bench-a"]),)),
                 (("one_answer_s", "compare_s", "compare_panes_s", "compare_panes_ratio"),
                  lambda: time_compare(engine, resolved.weight_hash, msgs))]
        for keys, run in steps:
            out.update(zip(keys, run(), strict=True))
            print(f"[llama.cpp {outtype}] " + ", ".join(f"{k}={out[k]:.4g}" for k in keys), file=sys.stderr)
    finally:
        engine.close()
    return out


def time_answer(engine: LlamaEngine, msgs: list[dict], adapter: str | None, runs: int = 3) -> tuple[float, float]:
    """Median time to first token (s) and decode tokens/s of a 128-token greedy answer."""
    settings = GenerationSettings(max_new_tokens=ANSWER_TOKENS, min_new_tokens=ANSWER_TOKENS)
    engine.submit(msgs, adapter, GenerationSettings(max_new_tokens=2)).text()  # attach, warm up
    ttft, speed = [], []
    for _ in range(runs):
        start, first = time.perf_counter(), None
        ticket = engine.submit(msgs, adapter, settings)
        for _delta in ticket:
            first = first or time.perf_counter()
        end = time.perf_counter()
        ttft.append(first - start)
        speed.append((ticket.completion_tokens - 1) / (end - first))
    return statistics.median(ttft), statistics.median(speed)


def time_load(engine: LlamaEngine, lora: Path, n: int = 5) -> float:
    """Median seconds to read a LoRA GGUF and attach it (``llama_adapter_lora_init`` + set)."""
    import llama_cpp

    times = []
    for _ in range(n):
        engine.attach(None)
        handle = engine._loras.pop(lora, None)
        if handle is not None:
            llama_cpp.llama_adapter_lora_free(handle)
        start = time.perf_counter()
        engine.attach(lora)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_switch(engine: LlamaEngine, lora: Path, n: int = 50) -> float:
    """Median seconds to switch between an attached-ready LoRA and the base."""
    engine.attach(lora)
    times = []
    for i in range(n):
        start = time.perf_counter()
        engine.attach(None if i % 2 == 0 else lora)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_compare(engine: LlamaEngine, base_hash: str, msgs: list[dict],
                 runs: int = 5) -> tuple[float, float, float, float]:
    """Median seconds of one adapter answer, of base + adapter one after the other on one
    context, and of the two side by side on the Compare tab's panes (a context each, the
    cores split between them); last, the median ratio of each side-by-side compare to the
    answer timed just before it (paired, so a slow minute slows both sides of a pair)."""
    from serve.llama_compare import LlamaCompare

    settings = GenerationSettings(max_new_tokens=ANSWER_TOKENS, min_new_tokens=ANSWER_TOKENS)
    panes = LlamaCompare(engine, base_hash)
    panes.compare(msgs, [None, "bench-a"], GenerationSettings(max_new_tokens=2))  # build, warm up
    one, seq, side = [], [], []
    try:
        for _ in range(runs):
            start = time.perf_counter()
            engine.submit(msgs, "bench-a", settings).text()
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            for adapter in (None, "bench-a"):
                engine.submit(msgs, adapter, settings).text()
            seq.append(time.perf_counter() - start)
            start = time.perf_counter()
            panes.compare(msgs, [None, "bench-a"], settings)
            side.append(time.perf_counter() - start)
    finally:
        panes.close()
    ratio = statistics.median(b / a for a, b in zip(one, side, strict=True))
    return statistics.median(one), statistics.median(seq), statistics.median(side), ratio


def render_llama(torch_results: list[dict], llama: dict) -> str:
    """A markdown table: llama.cpp's numbers, each PyTorch dtype's ratio to them, the goals."""
    tag = f"llama.cpp {llama['outtype']}"
    lines = [f"### llama.cpp in the same run ({tag}, {llama['threads']} threads)", "",
             "| measure | " + " | ".join([tag, *(f"PyTorch {r['dtype']}" for r in torch_results)]) + " | goal |",
             "|---" * (len(torch_results) + 3) + "|"]

    def row(label, key, show, goal="", ok=None):
        cells = [show(llama[key])] + [show(r[key]) + _mark(ok, r[key], llama[key]) for r in torch_results]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {goal} |")

    row("decode, base (128-token greedy)", "decode_base_tps", lambda v: f"{v:.1f} tok/s",
        ">= 0.8x llama.cpp", lambda t, ll: t >= 0.8 * ll)
    row("decode, adapter", "decode_adapter_tps", lambda v: f"{v:.1f} tok/s",
        ">= 0.8x llama.cpp", lambda t, ll: t >= 0.8 * ll)
    row("time to first token, adapter", "ttft_adapter_s", lambda v: f"{v * 1000:.0f} ms", "<= 100 ms",
        lambda t, ll: t <= 0.100)
    row("adapter load from disk, median of 5", "adapter_load_s", lambda v: f"{v * 1000:.1f} ms", "<= 300 ms",
        lambda t, ll: t <= 0.300)
    row("adapter switch, median of 50", "switch_s", lambda v: f"{v * 1000:.2f} ms")
    row("one answer (adapter, 128 tokens)", "one_answer_s", lambda v: f"{v:.2f} s")
    row("compare, base + adapter, one after the other", "compare_s", lambda v: f"{v:.2f} s")
    side = (f"{llama['compare_panes_s']:.2f} s = {llama['compare_panes_ratio']:.2f}x"
            + _mark(lambda ratio, _: ratio <= 1.3, llama["compare_panes_ratio"], None))
    lines.append("| compare, base + adapter side by side (what Compare runs on llama.cpp: a context per "
                 "pane); ratio: median of 5 pairs | " + " | ".join([side, *[""] * len(torch_results)])
                 + " | <= 1.3x |")
    ratios = ", ".join(f"{r['dtype']} {r['decode_base_tps'] / llama['decode_base_tps']:.2f}x / "
                       f"{r['decode_adapter_tps'] / llama['decode_adapter_tps']:.2f}x" for r in torch_results)
    lines += ["", f"PyTorch decode as a share of llama.cpp's (base / adapter): {ratios}. "
              f"llama.cpp's own ttft {llama['ttft_adapter_s'] * 1000:.0f} ms, adapter load "
              f"{llama['adapter_load_s'] * 1000:.1f} ms; its compare: one after the other "
              f"{llama['compare_s'] / llama['one_answer_s']:.2f}x one answer, side by side "
              f"{llama['compare_panes_ratio']:.2f}x. Compare on PyTorch: a batch of two rows "
              "(the PyTorch columns above)."]
    return "\n".join(lines) + "\n"


def _mark(ok, torch_value, llama_value) -> str:
    if ok is None:
        return ""
    return " ✅" if ok(torch_value, llama_value) else " ❌"
