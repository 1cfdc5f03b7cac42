"""The speeds a dry run or a budget run measured for one set of settings on this machine, kept so
that Check, Start and ``python -m finetune train`` can say what a time budget buys before anything
loads (``finetune.train.budget_plan``).

One JSON file per settings key under ``$TUNEDESK_HOME/speed/``: the key holds everything that
changes the start-up, a step or a validation pass (model, device, precision, quantization, batch,
accumulation, max length, LoRA shape, packing, threads, compiling, the data file and its
split), not the budget, the learning rate or the seed. A newer measurement replaces the older
one, unless the older one was taken on the same machine (CPU model, cores, flags) with faster
steps: a machine busy with other work only slows a step, and its record would refuse budgets
the machine trains when quiet. Without one the check says how to get it (a dry run) instead
of guessing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict

from core import paths
from core.model_costs import machine_info, same_machine
from core.user_text import quote
from finetune.train.budget_plan import Measured, estimate, verdict

SOURCES = {"dry run": "a dry run", "run": "a training run"}


def settings_key(cfg) -> str:
    """16 hex digits over the settings that change how long start-up, a step and validation take."""
    t, d, lo = cfg.train, cfg.data, cfg.lora
    keyed = {
        "model": cfg.model.name,
        "device": t.device,
        "precision": t.precision,
        "quantization": t.quantization,
        "batch": t.batch_size,
        "accum": t.grad_accum,
        "checkpointing": t.gradient_checkpointing,
        "threads": t.cpu_threads,
        "max_length": d.max_length,
        "packing": d.packing,
        "data": str(d.path),
        "max_samples": d.max_samples,
        "val_fraction": d.val_fraction,
        "r": lo.r,
        "mlp": lo.include_mlp,
        "targets": lo.target_modules,
        "world": cfg.run.nproc_per_node * cfg.run.nnodes,
    }
    if getattr(d, "with_passages", 0):  # absent from older keys: their speeds stay found
        keyed["with_passages"] = d.with_passages
        if getattr(d, "passage_share", 1.0) != 1.0:
            keyed["passage_share"] = d.passage_share
    if lo.top_layers:  # only when set, so the keys of speeds measured before it stay the same
        keyed["top_layers"] = lo.top_layers
    if getattr(t, "compile", "auto") != "auto":  # compiled steps run at their own speed
        keyed["compile"] = t.compile
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save(cfg, measured: Measured, source: str) -> None:
    """Keep ``measured`` for ``cfg``'s settings (``source``: "dry run" or "run"); a home that
    cannot take the file loses only the record."""
    folder = paths.home() / "speed"
    record = {
        **asdict(measured),
        "source": source,
        "measured_at": time.time(),
        "machine": machine_info(),
    }
    found = load(cfg)
    if found is not None and kept_over(found[1], record):
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{settings_key(cfg)}.tmp"
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(folder / f"{settings_key(cfg)}.json")
    except OSError:
        pass  # the run itself is fine; the next check just has no figure to go on


def kept_over(old: dict, new: dict) -> bool:
    """Whether the ``old`` record stays in place of ``new``: measured on the same machine, with
    faster steps (records from before machines were noted are replaced)."""
    machine = old.get("machine")
    return (
        isinstance(machine, dict)
        and same_machine(machine, new["machine"])
        and isinstance(old.get("step_s"), int | float)
        and old["step_s"] < new["step_s"]
    )


def load(cfg) -> tuple[Measured, dict] | None:
    """The last measurement for ``cfg``'s settings and its record, or None."""
    try:
        record = json.loads((paths.home() / "speed" / f"{settings_key(cfg)}.json").read_text())
        return Measured(
            **{k: record[k] for k in ("startup_s", "step_s", "val_batch_s", "val_batches")}
        ), record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _applies(cfg) -> bool:
    t = cfg.train
    return isinstance(t.time_budget_s, (int, float)) and t.time_budget_s > 0 and t.method == "sft"


def budget_problems(cfg) -> list[str]:
    """Why ``cfg``'s time budget cannot train a useful number of steps here, from the last
    measurement of these settings ([] when it can, or when none was measured yet)."""
    if not _applies(cfg) or (found := load(cfg)) is None:
        return []
    measured, record = found
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    return [f"{sentence.rstrip('.')} ({_when(record)})."] if level == "refuse" else []


def budget_text(cfg) -> str:
    """What the time budget buys, for Check: the estimate from the last measurement, or how to
    get one ("" without a budget)."""
    if not _applies(cfg):
        return ""
    found = load(cfg)
    if found is None:
        return (
            "No step time is measured yet for these settings on this machine: **Dry run** "
            "measures start-up, a step and a validation pass, and Check then says how many steps "
            "the budget buys."
        )
    measured, record = found
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    return ("⚠️ " if level == "refuse" else "") + f"{sentence.rstrip('.')} ({_when(record)})."


def _when(record: dict) -> str:
    source = SOURCES.get(record.get("source"), quote(record.get("source")))
    at = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.get("measured_at", 0)))
    return f"measured by {source} of these settings at {at}; a new dry run measures again"
