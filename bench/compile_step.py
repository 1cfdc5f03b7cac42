"""``python -m bench compile-step``: the product's training step with its decoder layers eager
and compiled (``train.compile``), on this machine's CPU or GPU, in the same run.

Each variant is a real ``finetune.train.train`` run of a few steps in a process of its own (the
gpu-check training row, ``bench.gpucheck.cases.train_row``, which runs on the CPU too): steady
tokens/s over the later half of the steps, the first step's seconds (compiling included), the
graphs compiled, MFU over the matmul rate measured in the run's precision. The verdict says
what compiling buys per step and after how many steps it has paid for its first one: what
``compile: auto`` should choose on this device.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROW_OF_PRECISION = {"fp32": "fp32-tf32", "fp16": "fp16", "bf16": "bf16"}


def measure(spec: dict, timeout: float) -> list[dict]:
    """Eager then compiled, each in a fresh process; one dict per variant."""
    from bench.gpucheck.suite import run_child

    rows = []
    for setting in ("off", "on"):
        t0 = time.perf_counter()
        out = run_child({**spec, "overrides": {"compile": setting}}, timeout)
        rows.append({"compile": setting, "seconds": time.perf_counter() - t0, **out})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def verdict(eager: dict, compiled: dict, tokens_per_step: int) -> str:
    """One sentence: the compiled step's rate against the eager one, and its pay-back."""
    if not (eager.get("passed") and compiled.get("passed")):
        failed = [r for r in (eager, compiled) if not r.get("passed")]
        return f"no verdict: compile {failed[0]['compile']} failed: {failed[0].get('error', '')}"
    if not compiled.get("compiled"):
        return "no verdict: the compiled run fell back to eager layers (its manifest says why)"
    ratio = compiled["tokens_per_s"] / eager["tokens_per_s"]
    saved = tokens_per_step / eager["tokens_per_s"] - tokens_per_step / compiled["tokens_per_s"]
    extra = compiled["warmup_s"] - eager["warmup_s"]
    text = f"compiled steps run at {ratio:.2f}x the eager rate"
    if saved <= 0:
        return text + ": compiling does not pay on this device"
    return (
        text + f"; compiling costs {extra:.0f} s more in the first steps, paid back after "
        f"{max(extra, 0) / saved:.0f} steps"
    )


def render(rows: list[dict], device: str, precision: str, batch: int, length: int) -> str:
    lines = [
        f"Device {device}, {precision}, batch {batch} x {length} tokens",
        "",
        "| decoder layers | steady tokens/s | MFU | first step s | first steps' extra s | "
        "graphs | result |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        name = "compiled" if r["compile"] == "on" else "eager"
        if not r.get("passed"):
            lines.append(f"| {name} | — | — | — | — | — | failed: {r.get('error', '')[:200]} |")
            continue
        lines.append(
            f"| {name} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f} % | "
            f"{r.get('first_step_s') or 0:.1f} | {r['warmup_s']:.1f} | "
            f"{r.get('compiled_graphs') or '—'} | "
            f"{'compiled' if r.get('compiled') else 'eager'} |"
        )
    return "\n".join(lines + ["", verdict(rows[0], rows[1], batch * length)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench compile-step", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter
    p.add_argument("--model", default="default", help="base model: Hub id, folder or 'default'")
    p.add_argument(
        "--random-weights", action="store_true", help="random weights from the model's config.json"
    )
    p.add_argument("--data", default="assets/demo_support.jsonl", help="dataset file")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda where there is one)")
    p.add_argument("--precision", default="auto", help="fp32, fp16, bf16 or auto (the Train tab's)")
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch")
    p.add_argument("--max-length", type=int, default=128, help="tokens per row (rows cut there)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per variant")
    p.add_argument("--timeout", type=float, default=900, help="seconds per variant")
    p.add_argument("--out", default=".", help="folder for compile-step.md and compile-step.json")
    args = p.parse_args(argv)
    import tempfile

    from core.gpu import recommended_precision
    from core.hardware import detect

    device = detect().device(args.device)
    precision = recommended_precision(device) if args.precision == "auto" else args.precision
    if precision not in ROW_OF_PRECISION or args.steps < 3 or args.batch_size < 1:
        print("error: --precision takes fp32, fp16, bf16 or auto; --steps 3+; --batch-size 1+")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        from bench.gpucheck.suite import random_weights_copy

        model = (
            random_weights_copy(args.model, Path(tmp) / "model")
            if args.random_weights
            else args.model
        )
        spec = {
            "kind": "train",
            "name": ROW_OF_PRECISION[precision],
            "model": model,
            "data": args.data,
            "steps": args.steps,
            "batch": args.batch_size,
            "max_length": args.max_length,
            "device": device.name,
            # the steady rate over the later half: compiling (and recompiling for the length
            # made symbolic, a step or two later) is the first steps' cost, counted apart
            "settle_steps": args.steps // 2,
        }
        rows = measure(spec, args.timeout)
    text = render(rows, device.label, precision, args.batch_size, args.max_length)
    (out / "compile-step.json").write_text(json.dumps(rows, indent=1))
    (out / "compile-step.md").write_text(text)
    print(text)
    return 0 if all(r.get("passed") for r in rows) else 1
