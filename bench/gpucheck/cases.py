"""The rows of ``python -m bench gpu-check``, each run in its own process (see
bench.gpucheck.suite).

Every training row runs :func:`finetune.train.train` itself for a few steps, as a user's run
would, and measures from its progress events: steady tokens/s (steps 2..N, the first step's
kernel selection excluded), peak memory and MFU. MFU counts 4 x base parameters (forward
plus the input-gradient backward through frozen weights) + 6 x LoRA parameters per real
token, the LM head on every token, over the matmul rate measured in the row's compute dtype.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

# name -> (precision, quantization, extra TrainArgs settings, what it shows)
TRAINING_ROWS = {
    "fp32-tf32": ("fp32", "none", {}, "fp32 weights, TF32 matmuls"),
    "fp16": ("fp16", "none", {}, "fp16 autocast with a gradient scaler"),
    "bf16": ("bf16", "none", {}, "bf16 weights and autocast, decoder layers compiled (auto)"),
    "bf16-eager": ("bf16", "none", {"compile": "off"}, "the bf16 row with eager decoder layers"),
    "8bit": ("bf16", "8bit", {}, "LLM.int8 base, bf16 compute"),
    "4bit-nf4": ("bf16", "4bit", {}, "NF4 base with double quantization, bf16 compute"),
    "paged-adamw-8bit": (
        "bf16",
        "none",
        {"optimizer": "paged_adamw_8bit"},
        "bitsandbytes paged 8-bit AdamW",
    ),
    "grad-checkpointing": (
        "bf16",
        "none",
        {"gradient_checkpointing": True},
        "non-reentrant checkpointing",
    ),
}


def run_config(
    model: str,
    data: str,
    precision: str,
    quantization: str,
    steps: int,
    batch: int,
    max_length: int,
    device: str = "cuda",
    **train,
):
    """A short run: no validation rows, probes or checkpoints, progress after every step."""
    from finetune.config import RunConfig

    cfg = RunConfig()
    cfg.model.name, cfg.data.path = model, data
    cfg.data.max_samples, cfg.data.max_length, cfg.data.val_fraction = (
        max(steps * batch, 64),
        max_length,
        0.0,
    )
    t = cfg.train
    t.device, t.precision, t.quantization = device, precision, quantization
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        steps,
        batch,
        1,
        0,
        0,
        0,
    )
    t.warmup_ratio = 0.0
    for key, value in train.items():
        setattr(t, key, value)
    cfg.run.adapter_name = f"gpu-check-{precision}-{quantization}-{int(time.time())}"
    return cfg


def steady_rate(start_time: float, progress: list[dict]) -> float:
    """Real tokens/s between the first and the last progress event.

    Each event gives the loop's cumulative ``tokens_per_second``; tokens so far are that rate
    times the time since the loop started (``start_time``, the "start" event).
    """
    if len(progress) < 2:
        e = progress[-1]
        return e["tokens_per_second"]
    first, last = progress[0], progress[-1]
    tokens = [e["tokens_per_second"] * (e["time"] - start_time) for e in (first, last)]
    return (tokens[1] - tokens[0]) / max(last["time"] - first["time"], 1e-9)


def flops_per_token(cfg) -> float:
    from core.models import resolve
    from finetune.train.dryrun import model_counts

    c = model_counts(resolve(cfg.model.name), cfg)
    return 4 * c["params"] + 6 * c["lora"]


def train_row(
    name: str,
    model: str,
    data: str,
    steps: int,
    batch: int,
    max_length: int,
    memory_limit_gib: float | None = None,
    device: str = "cuda",
    overrides: dict | None = None,
    settle_steps: int = 1,
) -> dict:
    """One training row; ``memory_limit_gib`` caps this process's GPU memory (forced OOM),
    ``overrides`` sets more TrainArgs fields (``bench compile-step``: ``compile``), the steady
    rate leaves out the first ``settle_steps`` steps (kernel choice, compiling).

    ``device="cpu"`` runs the fp32 and bf16 rows on the CPU (the suite's own tests).
    """
    import json

    from bench.training.measure import matmul_rate
    from core.gpu import use_device
    from finetune.train import train

    precision, quantization, extra, _ = TRAINING_ROWS[name]
    cfg = run_config(
        model,
        data,
        precision,
        quantization,
        steps,
        batch,
        max_length,
        device,
        **{**extra, **(overrides or {})},
    )
    use_device(device)  # as train() does (TF32 on), so the matmul ceiling below matches
    if memory_limit_gib:
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, memory_limit_gib * 2**30 / total))
    events: list[dict] = []
    result = train(cfg, on_event=events.append)
    start = next(e["time"] for e in events if e["type"] == "start")
    progress = [e for e in events if e["type"] == "progress"]
    settle = min(settle_steps, len(progress) - 2)
    rate = steady_rate(start, progress[settle:] if settle > 0 else progress)
    # What the first steps cost beyond the steady rate (kernel choice, compiling).
    mark = progress[max(settle, 0)]
    settled_s = mark["time"] - start
    warmup_s = settled_s - mark["tokens_per_second"] * settled_s / max(rate, 1e-9)
    ceiling = matmul_rate(device, precision) * 1e12
    manifest = (
        (Path(result.adapter_dir) / "manifest.json").read_text() if result.adapter_dir else "{}"
    )
    training = json.loads(manifest).get("training", {})
    losses = [e["loss"] for e in progress]
    return {
        "passed": result.status == "done"
        and result.steps == steps
        and all(map(math.isfinite, losses)),
        "tokens_per_s": rate,
        "peak_memory_gib": max(e["peak_memory_gib"] for e in progress),
        "mfu": rate * flops_per_token(cfg) / ceiling,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "oom_retries": training.get("oom_retries", []),
        "warmup_s": warmup_s,
        "compiled": training.get("compiled", False),
        "first_step_s": training.get("first_step_s"),
        "compiled_graphs": training.get("compiled_graphs"),
        "adapter": result.adapter_dir.name if result.adapter_dir else None,
        "warnings": [e["message"] for e in events if e["type"] == "warning"],
    }


BUDGET_SECONDS = 60.0  # the time-budget row: long enough for several hundred GPU steps
BUDGET_SLACK = 1.05  # the Train tab's promise: saved within the budget +- 5 %


def budget_row(
    model: str,
    data: str,
    batch: int | str,
    max_length: int,
    seconds: float = BUDGET_SECONDS,
    device: str = "cuda",
) -> dict:
    """The Train tab's time budget on ``device``: no step cap, the run sizes itself to
    ``seconds`` from its start and must save within them (+5 %); the learning rate must have
    reached the end of its schedule. ``batch`` ``"auto"`` is the Train tab's: trial steps pick it
    on a GPU. Reports what the budget bought (the manifest's ``budget``), the batch trained and
    why, and the MFU of the steps between the first and the last progress event."""
    import json

    from bench.training.measure import matmul_rate
    from core.gpu import recommended_precision, use_device
    from core.hardware import detect
    from finetune.config import first_run_defaults
    from finetune.train import train

    precision = recommended_precision(detect().device(device))
    cfg = run_config(model, data, precision, "none", 1, 1, max_length, device)
    cfg.data.max_samples = first_run_defaults().data.max_samples  # the Train tab's row cap
    cfg.train.batch_size = batch
    cfg.train.time_budget_s, cfg.train.log_every = seconds, 10
    events: list[dict] = []
    result = train(cfg, on_event=events.append)
    manifest = (
        json.loads((Path(result.adapter_dir) / "manifest.json").read_text())
        if result.adapter_dir
        else {}
    )
    bought = manifest.get("budget") or {}
    progress = [e for e in events if e["type"] == "progress"]
    used = bought.get("seconds_used", float("inf"))
    lr_end = progress[-1]["lr"] if progress else None
    training = manifest.get("training", {})
    start = next((e["time"] for e in events if e["type"] == "start"), None)
    # Steady: from the second progress event on where there are three (the first pays for
    # kernel choice and compiling).
    rate = steady_rate(start, progress[1:] if len(progress) > 2 else progress) if progress else None
    use_device(device)  # TF32 on, as train() had it, so the ceiling matches
    mfu = rate * flops_per_token(cfg) / (matmul_rate(device, precision) * 1e12) if rate else None
    return {
        "passed": result.status == "done"
        and used <= seconds * BUDGET_SLACK
        and bought.get("steps", 0) > 0
        and lr_end is not None
        and lr_end <= 0.05 * cfg.train.learning_rate,
        "tokens_per_s": progress[-1]["tokens_per_second"] if progress else None,
        "peak_memory_gib": max((e["peak_memory_gib"] for e in progress), default=None),
        "mfu": mfu,
        "budget": bought,
        "precision": precision,
        "batch": training.get("batch_size"),
        "batch_auto": (training.get("batch_auto") or {}).get("why", ""),
        "lr_end": lr_end,
        "adapter": result.adapter_dir.name if result.adapter_dir else None,
    }


MAX_BATCH_LIMIT = 256  # the search stops here: enough to show the finder works, in seconds


def max_batch_row(model: str, data: str, max_length: int) -> dict:
    """The largest bf16 micro-batch up to ``MAX_BATCH_LIMIT`` that trains at ``max_length``."""
    from bench.training.maxbatch import find_max_batch

    cfg = run_config(model, data, "bf16", "none", 1, 1, max_length)
    t0 = time.perf_counter()
    found = find_max_batch(cfg, limit=MAX_BATCH_LIMIT)
    return {
        "passed": found > 0,
        "max_batch": found,
        "limit": MAX_BATCH_LIMIT,
        "seconds": time.perf_counter() - t0,
    }


DEFAULT_EVAL_ROWS = 100  # held-out rows the Train-tab-default row scores (base and adapter)


def default_run_row(
    model: str,
    data: str,
    seconds: float = 600.0,
    device: str = "cuda",
    eval_rows: int = DEFAULT_EVAL_ROWS,
) -> dict:
    """The Train tab's first run on ``device`` as a user starts it (``first_run_defaults``: the
    time budget, batch size ``auto``, every row on a GPU, passages ``auto``) on ``data``, then
    the release checks on its held-out rows: steps, rows seen, passes over the data, the batch
    chosen and why, and the right-intent rate of the adapter and of the base beside it.

    ``passed``: the run saved within its budget (+5 %) and the checks gave a right-intent rate
    (what the rate should reach is for docs/benchmarks.md, not for this row: random weights
    answer nothing right)."""
    import json

    from eval.run import evaluate
    from finetune.config import first_run_defaults
    from finetune.train import train
    from inference.session import ModelSession

    cfg = first_run_defaults()
    cfg.model.name, cfg.data.path, cfg.train.device = model, data, device
    cfg.train.time_budget_s = seconds
    cfg.run.adapter_name = f"gpu-check-default-{int(time.time())}"
    started = time.perf_counter()
    result = train(cfg)
    trained_s = time.perf_counter() - started
    manifest = (
        json.loads((Path(result.adapter_dir) / "manifest.json").read_text())
        if result.adapter_dir
        else {}
    )
    bought, training = manifest.get("budget") or {}, manifest.get("training", {})
    right = {}
    if result.adapter_dir:
        session = ModelSession(model, device=device)
        report = evaluate(
            session, [result.adapter_dir.name], data, max_samples=eval_rows, golden=None
        )
        checked = (report.support or {}).get("models", {})
        right = {
            name: (checks.get("right_intent") or {}).get("rate") for name, checks in checked.items()
        }
    adapter_rate = right.get(result.adapter_dir.name) if result.adapter_dir else None
    return {
        "passed": result.status == "done"
        and bought.get("seconds_used", float("inf")) <= seconds * BUDGET_SLACK
        and adapter_rate is not None,
        "budget": bought,
        "batch": training.get("batch_size"),
        "batch_auto": (training.get("batch_auto") or {}).get("why", ""),
        "train_rows": manifest.get("data", {}).get("train_rows"),
        "right_intent": right,
        "adapter": result.adapter_dir.name if result.adapter_dir else None,
        "trained_s": trained_s,
        "precision": training.get("precision"),
    }
