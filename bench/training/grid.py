"""`python -m bench training`: training throughput of the seed recipe vs TuneDesk's, over a grid.

The user picks comma lists of devices, batch sizes, accumulation steps, precisions,
quantizations and recipes; every combination this machine can run is measured, each in a
fresh ``python -m bench training --_one`` process. One process per row keeps the CPU thread
count set once, and makes the peak-memory number (``ru_maxrss`` is a process-lifetime maximum)
belong to that row alone. The measurement itself is :func:`bench.training.recipes.measure`;
CSV, markdown and plot are :mod:`bench.training.results`.

Model FLOPs (what :func:`model_flops` counts, per timed run). The base is frozen, so a linear
layer costs 2 FLOPs per weight forward and 2 backward (gradient w.r.t. its input only; no
weight gradient), and a LoRA pair costs 6 (its weights do get gradients)::

    4 * P_body * real_tokens                 # every transformer linear (not the embedding lookup)
  + 6 * P_lora * real_tokens                 # adapters: forward, input grad, weight grad
  + 4 * V * H * head_positions               # LM head: seed = every real token,
                                             #          tunedesk = label tokens only
  + 12 * L * A * causal_pairs                # attention scores and weighted values: 2 matmuls
                                             # x 2 FLOPs x (forward + 2x backward); A = heads x
                                             # head_dim, causal_pairs = sum n(n+1)/2 per example

Padding is not counted (it is wasted work, so the padded seed recipe shows a lower MFU), and
neither are norms, activations, softmax or dequantization. MFU = (model FLOPs / seconds) divided
by the device's measured dense matmul rate (``--matmul-rate``: fp32 on the CPU, bf16 on CUDA).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECIPES = ("seed", "tunedesk")
SEED_LORA = {"r": 8, "alpha": 16, "dropout": 0.1}  # the seed scripts' LoRA settings


@dataclass
class BenchArgs:
    """Settings shared by every row of one benchmark."""

    model: str = "default"  # base model: Hub id, local folder or "default"
    data: str = "assets/demo_support.jsonl"  # dataset file, folder or Hub id
    max_length: int = 128  # tokens per example (the seed recipe pads every example to this)
    max_samples: int | None = None  # use at most this many rows
    max_steps: int = 20  # optimizer steps per row, warm-up included (0 = use epochs)
    epochs: float = 1.0  # passes over the rows when max_steps is 0
    warmup_steps: int = 2  # first steps of each row, run but not timed
    lora_r: int = SEED_LORA["r"]  # LoRA rank
    lora_alpha: int = SEED_LORA["alpha"]  # LoRA alpha
    lora_dropout: float = SEED_LORA["dropout"]  # LoRA dropout
    lora_targets: str = "auto"  # "auto" or comma-separated module names
    learning_rate: float = 2e-4  # peak learning rate (both recipes, same schedule)
    threads: int = 0  # CPU threads per row (0 = physical cores)
    model_from_config: bool = False  # random weights built from config.json (no weights read)
    config_json: str | None = None  # config.json to build from (with model_from_config)
    val_rows: int = 32  # held-out rows for the response-token validation loss (0 = skip)
    seed: int = 42  # data order and initialisation


@dataclass
class Point:
    """One grid point: a row of the report."""

    device: str
    batch: int
    accum: int
    precision: str
    quantization: str
    recipe: str

    @property
    def name(self) -> str:
        return (
            f"{self.recipe}/{self.device}/b{self.batch}x{self.accum}/{self.precision}/"
            f"{self.quantization}"
        )


@dataclass
class Grid:
    """The comma lists given on the command line."""

    device: list[str] = field(default_factory=lambda: ["auto"])
    batch: list[int] = field(default_factory=lambda: [4])
    accum: list[int] = field(default_factory=lambda: [1])
    precision: list[str] = field(default_factory=lambda: ["fp32"])
    quantization: list[str] = field(default_factory=lambda: ["none"])
    recipe: list[str] = field(default_factory=lambda: list(RECIPES))


def parse_list(text: str, kind=str) -> list:
    """``"4, 8,4"`` -> ``[4, 8]``: split on commas, strip, convert, drop repeats (order kept).

    Raises:
        ValueError: an empty list or an item that does not convert (named in the message).
    """
    out = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        try:
            value = kind(item)
        except ValueError:
            raise ValueError(f"{item!r} in {text!r} is not a valid {kind.__name__}") from None
        if value not in out:
            out.append(value)
    if not out:
        raise ValueError(f"empty list {text!r}: give one or more comma-separated values")
    return out


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads share a core's matmul units)."""
    allowed = os.sched_getaffinity(0)
    cores = set()
    for cpu in allowed:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(
                (
                    (topo / "physical_package_id").read_text().strip(),
                    (topo / "core_id").read_text().strip(),
                )
            )
        except OSError:
            return len(allowed)
    return len(cores) or len(allowed)


def run_config(args: BenchArgs, point: Point):
    """The ``RunConfig`` training would use for ``point`` (no eval, probes or checkpoints)."""
    from finetune.config import RunConfig

    cfg = RunConfig()
    cfg.model.name = args.model
    d, lo, t = cfg.data, cfg.lora, cfg.train
    d.path, d.max_length, d.max_samples, d.seed = (
        args.data,
        args.max_length,
        args.max_samples,
        args.seed,
    )
    lo.r, lo.alpha, lo.dropout = args.lora_r, args.lora_alpha, args.lora_dropout
    if args.lora_targets != "auto":
        lo.target_modules = parse_list(args.lora_targets)
    t.device, t.precision, t.quantization = point.device, point.precision, point.quantization
    t.batch_size, t.grad_accum, t.learning_rate, t.seed = (
        point.batch,
        point.accum,
        args.learning_rate,
        args.seed,
    )
    t.max_steps, t.epochs, t.cpu_threads = args.max_steps, args.epochs, args.threads
    t.eval_every = t.probe_every = t.save_every = 0
    return cfg


def expand_grid(
    args: BenchArgs, grid: Grid, hardware=None
) -> tuple[list[Point], list[tuple[Point, list[str]]]]:
    """The cartesian product of ``grid``, split into runnable points and skipped ones.

    A point is skipped when :func:`finetune.config.validate` (which asks
    ``Hardware.problems`` about device, precision and quantization) finds a problem with it.

    Returns:
        ``(points, skipped)``; ``skipped`` pairs each point with its reasons.
    """
    from core.hardware import detect
    from finetune.config import validate

    hw = hardware or detect()
    bad = [r for r in grid.recipe if r not in RECIPES]
    if bad:
        raise ValueError(f"unknown recipe(s) {', '.join(bad)}: choose from {', '.join(RECIPES)}")
    devices = [("cuda" if hw.has_cuda else "cpu") if d == "auto" else d for d in grid.device]
    points, skipped = [], []
    for dev, b, a, p, q, r in itertools.product(
        devices, grid.batch, grid.accum, grid.precision, grid.quantization, grid.recipe
    ):
        point = Point(dev, b, a, p, q, r)
        problems = validate(run_config(args, point), hw)
        if problems:
            skipped.append((point, problems))
        else:
            points.append(point)
    return points, skipped


def model_flops(shape: dict, real_tokens: int, head_positions: int, causal_pairs: int) -> float:
    """Model FLOPs of LoRA training over the counted tokens (formula in the module docstring).

    Args:
        shape: ``body_params``, ``lora_params``, ``head_params`` (V x H), ``layers`` and
            ``attention_width`` (heads x head_dim), from ``bench_measure.model_shape``.
    """
    return (
        4 * shape["body_params"] * real_tokens
        + 6 * shape["lora_params"] * real_tokens
        + 4 * shape["head_params"] * head_positions
        + 12 * shape["layers"] * shape["attention_width"] * causal_pairs
    )


def _subprocess_env(device: str, threads: int) -> tuple[dict, str]:
    """Environment for one row's process, and the device name to use inside it."""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    if device == "cpu":
        env["OMP_NUM_THREADS"] = str(threads)  # libraries beside torch stay within the budget too
    elif ":" in device:  # cuda:N -> that GPU alone, seen as cuda:0 (the Trainer uses cuda:0)
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        device = "cuda"
    return env, device


def run_isolated(job: dict, device: str, threads: int, timeout: float | None = None) -> dict:
    """Run one ``--_one`` job (a row or a matmul-rate measurement) in a fresh process.

    Returns:
        The job's result dict, or ``{"error": sentence}`` when the process failed.
    """
    env, job["device"] = _subprocess_env(device, threads)
    job["threads"] = threads
    cmd = [sys.executable, "-m", "bench", "training", "--_one", json.dumps(job)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-1:] or [
        f"exit code {done.returncode}"
    ]
    return {"error": tail[0][:300]}


def run_grid(
    args: BenchArgs, points: list[Point], on_row=None, timeout: float | None = None, rounds: int = 1
) -> list[dict]:
    """Measure every point in its own process, ``rounds`` times in turn (all points, then all
    again: rows compared with each other ran minutes apart at most); failed rows carry ``error``.

    Each point's row is its median round (the lower middle of an even count) and lists every
    round's real tokens/s in ``round_tokens_per_s`` (None for a failed round).

    Args:
        on_row: called with ``(index, point, result)`` after each row (progress printing).
    """
    threads = args.threads or physical_cores()
    runs: list[list[dict]] = [[] for _ in points]
    for _ in range(rounds):
        for i, point in enumerate(points):
            job = {"kind": "row", "args": asdict(args), "point": asdict(point)}
            result = run_isolated(job, point.device, threads, timeout)
            result.update(point=point, threads=threads if point.device == "cpu" else None)
            runs[i].append(result)
            if on_row:
                on_row(i, point, result)
    return [median_round(results) for results in runs]


def median_round(results: list[dict]) -> dict:
    """One point's rounds as one row: the median round by real tokens/s, with every round's."""
    done = sorted((r for r in results if "error" not in r), key=lambda r: r["real_tokens_per_s"])
    row = dict(done[(len(done) - 1) // 2] if done else results[0])
    row["round_tokens_per_s"] = [r.get("real_tokens_per_s") for r in results]
    return row


def matmul_rates(points: list[Point], threads: int) -> dict[str, float]:
    """Measured dense matmul TFLOP/s per device kind: fp32 on the CPU, bf16 on CUDA."""
    rates = {}
    for device in dict.fromkeys(p.device for p in points):
        precision = "fp32" if device == "cpu" else "bf16"
        result = run_isolated({"kind": "matmul", "precision": precision}, device, threads)
        if "tflops" in result:
            rates[device] = result["tflops"]
    return rates
