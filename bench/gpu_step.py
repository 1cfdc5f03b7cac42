"""``python -m bench gpu-step``: where one LoRA training step's time goes on a GPU, and what
the known remedies buy.

A small model's LoRA step is launch-bound: hundreds of small kernels, each a few microseconds
of GPU work behind the CPU's launch cost, so MFU stays low (gpu-check's figures are in
docs/benchmarks-log.md). This command builds the step the way ``finetune.train`` does (the base
loaded by :func:`finetune.train.setup.load_lora_model`, LoRA from the run config, the selective
cross-entropy of :func:`finetune.train.steps.loss_sum`, fused AdamW), on random tokens of a fixed
length, and measures for each variant steady tokens/s, the GPU's busy share of a step (CUDA time /
wall time, from ``torch.profiler``), kernel launches per step and MFU. MFU counts, as gpu-check
does, 4 x base parameters + 6 x LoRA parameters per token over the measured bf16 matmul ceiling.

Variants: eager (as training runs today), regional ``torch.compile`` (each decoder layer
compiled once, the same code reused by all layers: short compile times), and the same at
larger batches. Writes ``gpu-step.md`` and ``gpu-step.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def build_step(
    model_path: str,
    batch: int,
    length: int,
    compiled: bool,
    device: str = "cuda",
    precision: str = "bf16",
):
    """``(step, model, flops_per_token)``: ``step()`` runs one optimizer step on
    fixed random tokens."""
    import torch

    from bench.gpucheck.cases import flops_per_token, run_config
    from core.models import resolve
    from finetune.train.compiled import decoder_layers
    from finetune.train.setup import load_lora_model
    from finetune.train.steps import build_optimizer, make_autocast

    cfg = run_config(model_path, "unused.csv", precision, "none", 1, batch, length, device)
    resolved = resolve(model_path)
    model, _, _ = load_lora_model(cfg, resolved, device)
    model.train()
    if compiled:
        for layer in decoder_layers(model):  # as finetune.train.compiled does
            layer.compile()
    optimizer = build_optimizer(model, 1e-4, 0.0, "adamw_torch", device)
    autocast = make_autocast(device, precision)
    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length), generator=gen).to(device)
    batch_inputs = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> torch.Tensor:
        from finetune.train.steps import loss_sum

        with autocast() if autocast else torch.autocast(device.split(":")[0], enabled=False):
            s, n = loss_sum(model, batch_inputs)
        (s / n).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return s

    return step, model, flops_per_token(cfg)


def measure(step, tokens_per_step: int, steps: int = 10, warmup: int = 3) -> dict:
    """Steady tokens/s over ``steps`` after ``warmup`` (compilation, kernel choice)."""
    import torch

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / steps
    return {
        "step_ms": 1000 * seconds,
        "tokens_per_s": tokens_per_step / seconds,
        "warmup_s": warm_s,
    }


def profile(step, steps: int = 3) -> dict:
    """GPU busy share, kernel launches per step and the top kernels, from ``torch.profiler``."""
    import torch
    from torch.profiler import ProfilerActivity

    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time for e in kernels)
    top = sorted(prof.key_averages(), key=lambda e: e.self_device_time_total, reverse=True)[:12]
    return {
        "gpu_busy": busy_us / wall_us,
        "kernels_per_step": len(kernels) / steps,
        "top": [
            {
                "name": e.key[:90],
                "calls_per_step": e.count / steps,
                "ms_per_step": e.self_device_time_total / 1000 / steps,
            }
            for e in top
        ],
    }


def run(model_path: str, variants: list[tuple[str, int, int, bool]], out: Path) -> list[dict]:
    import torch

    from bench.training.measure import matmul_rate

    ceiling = matmul_rate("cuda", "bf16") * 1e12
    rows = []
    for name, batch, length, compiled in variants:
        row = {"variant": name, "batch": batch, "length": length, "compiled": compiled}
        try:
            step, model, fpt = build_step(model_path, batch, length, compiled)
            row.update(measure(step, batch * length))
            row["mfu"] = row["tokens_per_s"] * fpt / ceiling
            row.update(profile(step))
            row["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            del step, model
        except Exception as err:  # one variant's failure is a row, the others still run
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
        (out / "gpu-step.json").write_text(
            json.dumps({"ceiling_tflops": ceiling / 1e12, "rows": rows}, indent=1)
        )
    (out / "gpu-step.md").write_text(render(rows, ceiling))
    return rows


def render(rows: list[dict], ceiling: float) -> str:
    import torch

    lines = [
        f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, bf16 matmul ceiling "
        f"{ceiling / 1e12:.0f} TFLOP/s",
        "",
        "| variant | batch x length | tokens/s | step ms | MFU | GPU busy | kernels/step | "
        "warm-up s | peak GiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['variant']} | {r['batch']} x {r['length']} | failed: {r['error']} ||||||| "
            )
            continue
        lines.append(
            f"| {r['variant']} | {r['batch']} x {r['length']} | {r['tokens_per_s']:,.0f} | "
            f"{r['step_ms']:.1f} | {100 * r['mfu']:.1f} % | {100 * r['gpu_busy']:.0f} % | "
            f"{r['kernels_per_step']:.0f} | {r['warmup_s']:.1f} | {r['peak_memory_gib']:.1f} |"
        )
    for r in rows:
        if r.get("top"):
            lines += [
                "",
                f"Top kernels, {r['variant']} ({r['batch']} x {r['length']}):",
                "",
                "| kernel | calls/step | ms/step |",
                "|---|---:|---:|",
            ]
            lines += [
                f"| `{k['name']}` | {k['calls_per_step']:.0f} | {k['ms_per_step']:.2f} |"
                for k in r["top"]
            ]
    return "\n".join(lines) + "\n"


VARIANTS = {
    "eager": ("eager (training today)", False),
    "compiled": ("regional torch.compile", True),
}


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(
        prog="python -m bench gpu-step", description=__doc__.splitlines()[0]
    )
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument(
        "--model", required=True, help="model folder (config + tokenizer; see --random-weights)"
    )
    p.add_argument(
        "--random-weights", action="store_true", help="random weights from the model's config.json"
    )
    p.add_argument("--batches", default="64,256", help="micro-batch sizes, comma-separated")
    p.add_argument("--length", type=int, default=128, help="tokens per row")
    p.add_argument("--variants", default="eager,compiled", help=",".join(VARIANTS))
    p.add_argument("--out", default=".", help="folder for gpu-step.md and gpu-step.json")
    args = p.parse_args(argv)
    import tempfile

    import torch

    if not torch.cuda.is_available():
        print("error: gpu-step needs a CUDA GPU, and torch sees none on this machine")
        return 2
    from bench.gpucheck.suite import random_weights_copy

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = [
        (VARIANTS[v][0], int(b), args.length, VARIANTS[v][1])
        for b in args.batches.split(",")
        for v in args.variants.split(",")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        model = (
            random_weights_copy(args.model, Path(tmp) / "model")
            if args.random_weights
            else args.model
        )
        rows = run(model, variants, out)
    print((out / "gpu-step.md").read_text())
    return 0 if all("error" not in r for r in rows) else 1
