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

A record notes the batch it was measured at and where (``batch``, ``on``): under batch size
``auto`` on a CPU the next run of the same settings takes the largest batch from
``DEFAULT_BATCH`` down to ``SMALLEST_AUTO_BATCH`` whose steps the budget buys
``MIN_USEFUL_STEPS`` of, or the smallest where none does (``auto_batch``): the same rows in
more, smaller steps, where a slow hour would otherwise leave too few steps and refuse the next
run of the defaults.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict

from core import paths
from core.model_costs import machine_info, same_machine
from core.user_text import quote
from finetune.config import AUTO_BATCH, DEFAULT_BATCH
from finetune.train.budget_plan import (
    MIN_USEFUL_STEPS,
    Measured,
    at_batch,
    estimate,
    fit_batch,
    verdict,
)

SOURCES = {"dry run": "a dry run", "run": "a training run"}
# Batch size auto on a CPU goes no lower than this to fit a time budget's steps: in equal
# minutes on the Train tab's defaults, batches of 6 and 4 saw the rows 8 did and scored no worse
# (docs/benchmarks.md, "Batch size under a short budget").
SMALLEST_AUTO_BATCH = 4


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


def save(cfg, measured: Measured, source: str, batch: int, on: str) -> None:
    """Keep ``measured`` for ``cfg``'s settings (``source``: "dry run" or "run"; ``batch``: the
    rows per micro-batch it was measured at; ``on``: the device, "cpu" or "cuda:N"); a home
    that cannot take the file loses only the record."""
    folder = paths.home() / "speed"
    record = {
        **asdict(measured),
        "batch": int(batch),
        "on": on,
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
    """Whether the ``old`` record stays in place of ``new``: measured on the same machine and
    device, with faster steps per row (records from before machines and batches were noted are
    replaced)."""
    machine = old.get("machine")
    return (
        isinstance(machine, dict)
        and same_machine(machine, new["machine"])
        and old.get("on") == new["on"]
        and _positive_int(old.get("batch"))
        and isinstance(old.get("step_s"), int | float)
        and old["step_s"] / old["batch"] < new["step_s"] / new["batch"]
    )


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


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


def auto_batch(cfg) -> tuple[int, str] | None:
    """The batch ``auto`` takes on a CPU for ``cfg``'s time budget, and one sentence why, from
    the last measurement of these settings; None where that is not for the record to say (a
    number set, no budget, no CPU record)."""
    found = _for_budget(cfg)
    if found is None or found[2] is None:
        return None
    measured, record, batch = found
    steps = estimate(cfg.train.time_budget_s, measured).steps
    why = f"the {cfg.train.time_budget_s / 60:g}-minute budget buys about {steps} steps of {batch}"
    if batch < DEFAULT_BATCH:
        at_default = at_batch(measured, batch, DEFAULT_BATCH)
        why += (
            f", {estimate(cfg.train.time_budget_s, at_default).steps} of {DEFAULT_BATCH}: "
            f"{MIN_USEFUL_STEPS} are the fewest a useful run takes"
        )
    source, at = _source_at(record)
    return batch, (
        f"batch size auto: {batch} rows per micro-batch on the CPU ({why}, at the speeds "
        f"{source} of these settings measured at {at})"
    )


def _for_budget(cfg) -> tuple[Measured, dict, int | None] | None:
    """The last measurement of ``cfg``'s settings as its time budget will spend it: the speeds,
    the record, and where batch size ``auto`` trains on a CPU record, the batch it takes
    (``budget_plan.fit_batch``) with the speeds at that batch; None without a record."""
    found = load(cfg)
    if found is None:
        return None
    measured, record = found
    if not (
        _applies(cfg)
        and cfg.train.batch_size == AUTO_BATCH
        and record.get("on") == "cpu"
        and _positive_int(record.get("batch"))
    ):
        return measured, record, None
    batch, measured = fit_batch(
        cfg.train.time_budget_s, measured, record["batch"], DEFAULT_BATCH, SMALLEST_AUTO_BATCH
    )
    return measured, record, batch


def budget_problems(cfg) -> list[str]:
    """Why ``cfg``'s time budget cannot train a useful number of steps here, from the last
    measurement of these settings ([] when it can, or when none was measured yet). Batch size
    ``auto`` on a CPU is judged at the batch it takes (``auto_batch``)."""
    if not _applies(cfg) or (found := _for_budget(cfg)) is None:
        return []
    measured, record, _ = found
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    return [f"{sentence.rstrip('.')} ({_when(record)})."] if level == "refuse" else []


def budget_text(cfg) -> str:
    """What the time budget buys, for Check: the estimate from the last measurement, or how to
    get one ("" without a budget)."""
    if not _applies(cfg):
        return ""
    found = _for_budget(cfg)
    if found is None:
        return (
            "No step time is measured yet for these settings on this machine: **Dry run** "
            "measures start-up, a step and a validation pass, and Check then says how many steps "
            "the budget buys."
        )
    measured, record, batch = found
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    text = ("⚠️ " if level == "refuse" else "") + f"{sentence.rstrip('.')} ({_when(record)})."
    if batch is not None and batch < DEFAULT_BATCH:
        text += (
            f" Batch size auto takes {batch} rows per micro-batch for it: at {DEFAULT_BATCH} "
            f"the budget would buy fewer than {MIN_USEFUL_STEPS} steps."
        )
    return text


def _source_at(record: dict) -> tuple[str, str]:
    """What measured ``record`` ("a dry run") and when ("2026-12-06 21:14")."""
    source = SOURCES.get(record.get("source"), quote(record.get("source")))
    return source, time.strftime("%Y-%m-%d %H:%M", time.localtime(record.get("measured_at", 0)))


def _when(record: dict) -> str:
    source, at = _source_at(record)
    return f"measured by {source} of these settings at {at}; a new dry run measures again"
