"""``python -m bench gpu-check``: a smoke suite of every CUDA path, on one GPU, in minutes.

Each row runs in its own process, under a time limit and a watchdog that prints every
thread's stack before the limit: one row that crashes or hangs (a driver fault, a library
deadlock) is reported as failed with its traceback, and the suite goes on. Rows: 5 steps each
of fp32 (TF32), fp16, bf16 (decoder layers compiled, as training compiles them on a GPU by
default, and eager beside it), 8-bit, 4-bit NF4, paged 8-bit AdamW and gradient checkpointing
(``bench.gpucheck.cases``); a forced out-of-memory that must recover; the max-batch finder; chat and
compare on CUDA (``bench.gpucheck.chat``, run by module name: finetune does not import
adapters).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.gpucheck.cases import TRAINING_ROWS

ROWS = (*TRAINING_ROWS, "forced-oom", "max-batch", "time-budget", "chat", "compare")
# Rows run only when named in --rows: the Train tab's whole first run (its 10-minute budget,
# then the release checks on held-out rows) takes minutes, not seconds.
ON_REQUEST = ("train-tab-default",)
EVAL_ALLOWANCE_S = 300.0  # beyond its budget, the seconds that row may take (load, checks)
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
OOM_SHARE = 0.6  # the forced-OOM row gets this share of the bf16 row's peak memory


@dataclass
class CheckArgs:
    """What the suite trains and how long each row may take."""

    model: str  # folder or name for core.models.resolve
    data: str = "assets/demo_support.jsonl"
    steps: int = 5  # optimizer steps per training row
    batch: int = 64  # micro-batch size of the training rows
    max_length: int = 128  # tokens per example
    row_timeout: float = 150.0  # seconds per row, model loading included
    budget_seconds: float = 60.0  # the time-budget row's budget
    default_seconds: float = 600.0  # the train-tab-default row's budget (the Train tab's)


@dataclass
class RowResult:
    name: str
    passed: bool
    tokens_per_s: float | None = None
    peak_memory_gib: float | None = None
    mfu: float | None = None
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    error: str = ""


def random_weights_copy(model: str, dest: Path) -> str:
    """``dest`` holding ``model``'s config and tokenizer with random weights (nothing read).

    The suite tests code paths, not answers, so the architecture is all it needs, and a
    model too big to copy onto the GPU machine still travels as its config.
    """
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from core.models import resolve

    src = resolve(model).path
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(
            (".safetensors", ".bin", ".pt", ".gguf", ".json.index")
        ):
            shutil.copy2(f, dest / f.name)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dest)
    (dest / "tunedesk_model.json").unlink(missing_ok=True)  # describes the real weights
    return str(dest)


def _row_spec(name: str, args: CheckArgs, results: dict[str, RowResult]) -> dict | None:
    """The child's instructions for ``name``; None when a row it depends on failed."""
    base = {"model": args.model, "data": args.data, "max_length": args.max_length}
    if name in TRAINING_ROWS:
        return {**base, "kind": "train", "name": name, "steps": args.steps, "batch": args.batch}
    if name == "forced-oom":
        bf16 = results.get("bf16")
        if not (bf16 and bf16.passed and bf16.peak_memory_gib):
            return None
        return {
            **base,
            "kind": "train",
            "name": "bf16",
            "steps": 3,
            "batch": args.batch,
            "memory_limit_gib": OOM_SHARE * bf16.peak_memory_gib,
        }
    if name == "max-batch":
        return {**base, "kind": "max-batch"}
    if name == "train-tab-default":
        return {
            **base,
            "kind": "train-tab-default",
            "seconds": args.default_seconds,
            "timeout": args.default_seconds + EVAL_ALLOWANCE_S,
        }
    if name == "time-budget":
        # The Train tab's batch, "auto": trial steps pick it on a GPU (finetune/train/batch_fit.py)
        return {**base, "kind": "time-budget", "batch": "auto", "seconds": args.budget_seconds}
    adapter = results.get("bf16")
    if not (adapter and adapter.passed):
        return None
    return {"kind": name, "model": args.model, "adapter": adapter.details.get("adapter")}


def run_child(spec: dict, timeout: float) -> dict:
    """Run one row in a fresh process; its result is the last line of its output (JSON)."""
    module = (
        "bench.gpucheck.chat" if spec["kind"] in ("chat", "compare") else "bench.gpucheck.suite"
    )
    code = (
        "import faulthandler, json, sys; "
        f"faulthandler.dump_traceback_later({max(timeout - 10, 5)}, exit=True); import {module} "
        "as m; print(json.dumps(m.run_row(json.loads(sys.argv[1]))), flush=True)"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=_PROJECT_ROOT,
            env=env,
        )
    except subprocess.TimeoutExpired as err:
        tail = (err.stderr or b"")[-1500:]
        return {"passed": False, "error": f"no answer within {timeout:.0f} s: {tail!r}"}
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    try:
        return json.loads(last[0]) if proc.returncode == 0 and last else _failure(proc)
    except json.JSONDecodeError:
        return _failure(proc)


def _failure(proc) -> dict:
    lines = [line for line in (proc.stderr or "").splitlines() if line.strip()]
    return {"passed": False, "error": f"exit code {proc.returncode}: " + "\n".join(lines[-25:])}


def run_row(spec: dict) -> dict:
    """Child side of :func:`run_child` for finetune's rows."""
    from bench.gpucheck import cases as gpucheck_rows

    if spec["kind"] == "max-batch":
        return gpucheck_rows.max_batch_row(spec["model"], spec["data"], spec["max_length"])
    if spec["kind"] == "train-tab-default":
        return gpucheck_rows.default_run_row(
            spec["model"], spec["data"], spec["seconds"], spec.get("device", "cuda")
        )
    if spec["kind"] == "time-budget":
        return gpucheck_rows.budget_row(
            spec["model"],
            spec["data"],
            spec["batch"],
            spec["max_length"],
            spec["seconds"],
            spec.get("device", "cuda"),
        )
    return gpucheck_rows.train_row(
        spec["name"],
        spec["model"],
        spec["data"],
        spec["steps"],
        spec["batch"],
        spec["max_length"],
        spec.get("memory_limit_gib"),
        spec.get("device", "cuda"),
        spec.get("overrides"),
        spec.get("settle_steps", 1),
    )


def run_suite(args: CheckArgs, rows=ROWS, on_row=None) -> list[RowResult]:
    """Every row in order; ``on_row(result)`` after each."""
    import time

    results: dict[str, RowResult] = {}
    for name in rows:
        spec = _row_spec(name, args, results)
        t0 = time.perf_counter()
        if spec is None:
            out = {
                "passed": False,
                "error": "skipped: the bf16 row it builds on failed or did not run",
            }
        else:
            out = run_child(spec, spec.get("timeout", args.row_timeout))
        if name == "forced-oom" and out.get("passed") and not out.get("oom_retries"):
            out = {**out, "passed": False, "error": "the memory cap caused no out-of-memory retry"}
        measures = {k: out.pop(k, None) for k in ("tokens_per_s", "peak_memory_gib", "mfu")}
        passed, error = bool(out.pop("passed", False)), str(out.pop("error", ""))
        results[name] = RowResult(
            name, passed, **measures, seconds=time.perf_counter() - t0, details=out, error=error
        )
        if on_row:
            on_row(results[name])
    return list(results.values())


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _note(d: dict) -> str:
    """The note column: what a row's details say beyond its figures."""
    if d.get("oom_retries"):
        return (
            f"micro-batch {d['oom_retries'][-1]['micro_batch']} after {len(d['oom_retries'])} "
            "OOM retries"
        )
    if "max_batch" in d:
        return f"largest batch {d['max_batch']}"
    if "right_intent" in d:
        rates = d["right_intent"] or {}
        base = next((v for k, v in rates.items() if k != d.get("adapter")), None)
        tuned, b = rates.get(d.get("adapter")), d.get("budget") or {}
        return (
            f"batch {d.get('batch')}, {b.get('steps')} steps, {b.get('epochs', 0):.1f} passes "
            f"over {d.get('train_rows')} rows; right intent {_fmt(tuned, '.3f')} (base "
            f"{_fmt(base, '.3f')})"
        )
    if d.get("budget"):
        b = d["budget"]
        return (
            f"batch {d.get('batch')}, {b.get('steps')} steps, {b.get('epochs', 0):.1f} epochs, "
            f"saved at {b.get('seconds_used', 0):.1f} of {b.get('seconds', 0):g} s, "
            f"{d['precision']}"
        )
    if "answer" in d:
        return d["answer"][:60].replace("|", "/").replace("\n", " ")
    if d.get("compiled"):
        return (
            f"compiled: {d.get('compiled_graphs')} graphs, first step "
            f"{d.get('first_step_s') or 0:.1f} s"
        )
    return ""


def markdown(results: list[RowResult]) -> str:
    """The results as a table, with each failure's message below it."""
    lines = [
        "| check | result | tokens/s | peak memory GiB | MFU | seconds | note |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        note = _note(r.details)
        mfu = None if r.mfu is None else 100 * r.mfu
        lines.append(
            f"| {r.name} | {'passed' if r.passed else '**failed**'} | "
            f"{_fmt(r.tokens_per_s, ',.0f')} | {_fmt(r.peak_memory_gib, '.2f')} | "
            f"{_fmt(mfu, '.1f')}{'%' if mfu is not None else ''} | {r.seconds:.0f} | {note} |"
        )
    failures = [f"- **{r.name}**: {r.error.strip()[-800:]}" for r in results if r.error]
    return "\n".join(lines + ([""] + failures if failures else []))


def save(results: list[RowResult], out: Path) -> None:
    """results.json and report.md in ``out`` (written whole, then renamed)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("results.json", json.dumps([asdict(r) for r in results], indent=2)),
        ("report.md", markdown(results) + "\n"),
    ):
        with tempfile.NamedTemporaryFile("w", dir=out, delete=False) as f:
            f.write(text)
        os.replace(f.name, out / name)
