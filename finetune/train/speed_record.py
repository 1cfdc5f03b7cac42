"""The speeds a dry run or a budget run measured for one set of settings on this machine, kept so
that Check, Start and ``python -m finetune train`` can say what a time budget buys before anything
loads (``finetune.train.budget_plan``).

One JSON file per settings key under ``$TUNEDESK_HOME/speed/``: the key holds everything that
changes the start-up, a step or a validation pass (model, device, precision, quantization, batch,
accumulation, max length, LoRA shape, packing, threads, compiling, the data file and its
split), not the budget, the learning rate or the seed (the batch as asked: ``auto`` is one
key). In it, one record per batch the settings trained at (``by_batch``), noting where
(``on``: "cpu" or "cuda:N"). A newer measurement of a batch replaces the older one, unless the
older one was taken on the same machine (CPU model, cores, flags) and device with faster
steps: a machine busy with other work only slows a step, and its record would refuse budgets
the machine trains when quiet. A measurement on another machine or device drops the records
of the old one. Without a record the check says how to get one (a dry run) instead of
guessing.

Under batch size ``auto`` on a CPU the next run of the same settings takes the largest batch
from ``DEFAULT_BATCH`` down to ``SMALLEST_AUTO_BATCH`` whose steps the budget buys
``MIN_USEFUL_STEPS`` of, or the smallest where none does (``auto_batch``): the same rows in
more, smaller steps, where a slow hour would otherwise leave too few steps and refuse the next
run of the defaults. A batch not measured is judged from the nearest one measured, its time in
proportion to its rows (``budget_plan.at_batch``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass

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
FIELDS = ("startup_s", "step_s", "val_batch_s", "val_batches")  # a record's Measured
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
    """Keep ``measured`` for ``cfg``'s settings at ``batch`` rows per micro-batch (``source``:
    "dry run" or "run"; ``on``: the device, "cpu" or "cuda:N"), beside the other batches' kept
    measurements of the same machine and device; a home that cannot take the file loses only
    the record."""
    record = {
        **asdict(measured),
        "batch": int(batch),
        "on": on,
        "source": source,
        "measured_at": time.time(),
        "machine": machine_info(),
    }
    kept = _read(cfg)
    old = kept.get(str(record["batch"]))
    if old is not None and kept_over(old, record):
        return
    # Another machine's or device's speeds say nothing here any more.
    kept = {b: r for b, r in kept.items() if _same_place(r, record)}
    kept[str(record["batch"])] = record
    folder = paths.home() / "speed"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{settings_key(cfg)}.tmp"
        tmp.write_text(json.dumps({"by_batch": kept}, indent=2))
        tmp.replace(folder / f"{settings_key(cfg)}.json")
    except OSError:
        pass  # the run itself is fine; the next check just has no figure to go on


def kept_over(old: dict, new: dict) -> bool:
    """Whether the ``old`` record of a batch stays in place of ``new``, of the same batch:
    measured on the same machine and device, with faster steps (records from before machines
    and devices were noted are replaced)."""
    return (
        _same_place(old, new)
        and isinstance(old.get("step_s"), int | float)
        and old["step_s"] < new["step_s"]
    )


def _same_place(old: dict, new: dict) -> bool:
    machine = old.get("machine")
    return (
        isinstance(machine, dict)
        and same_machine(machine, new["machine"])
        and old.get("on") == new["on"]
    )


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _measured(record) -> Measured | None:
    try:
        return Measured(**{k: record[k] for k in FIELDS})
    except (KeyError, TypeError):
        return None


def _read(cfg) -> dict[str, dict]:
    """The kept measurements of ``cfg``'s settings by batch (``{"8": record}``); a file from
    before batches were kept apart holds one, under its batch if it noted one."""
    try:
        data = json.loads((paths.home() / "speed" / f"{settings_key(cfg)}.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    records = (
        data["by_batch"]
        if isinstance(data.get("by_batch"), dict)
        else {str(data.get("batch", "unnoted")): data}
    )
    return {b: r for b, r in records.items() if isinstance(r, dict) and _measured(r) is not None}


def load(cfg) -> tuple[Measured, dict] | None:
    """The newest measurement for ``cfg``'s settings and its record, or None."""
    return _newest(_read(cfg))


def _newest(kept: dict[str, dict]) -> tuple[Measured, dict] | None:
    if not kept:
        return None
    newest = max(kept.values(), key=lambda r: r.get("measured_at", 0) or 0)
    return _measured(newest), newest


def _applies(cfg) -> bool:
    t = cfg.train
    return isinstance(t.time_budget_s, (int, float)) and t.time_budget_s > 0 and t.method == "sft"


@dataclass
class _Judged:
    """A time budget as the kept measurements judge it."""

    measured: Measured  # the speeds it is judged at
    record: dict  # the measurement they come from
    batch: int | None = None  # the batch ``auto`` takes on a CPU (None: not for these to say)
    at_default: Measured | None = None  # with ``batch``: the speeds at ``DEFAULT_BATCH``


def auto_batch(cfg) -> tuple[int, str] | None:
    """The batch ``auto`` takes on a CPU for ``cfg``'s time budget, and one sentence why, from
    the kept measurements of these settings; None where that is not for them to say (a number
    set, no budget, no CPU measurement)."""
    judged = _judge(cfg)
    if judged is None or judged.batch is None:
        return None
    budget_s, batch = cfg.train.time_budget_s, judged.batch
    steps = estimate(budget_s, judged.measured).steps
    why = f"the {budget_s / 60:g}-minute budget buys about {steps} steps of {batch}"
    if batch < DEFAULT_BATCH:
        why += (
            f", {estimate(budget_s, judged.at_default).steps} of {DEFAULT_BATCH}: "
            f"{MIN_USEFUL_STEPS} are the fewest a useful run takes"
        )
    source, at = _source_at(judged.record)
    return batch, (
        f"batch size auto: {batch} rows per micro-batch on the CPU ({why}, at the speeds "
        f"{source} of these settings measured at {at})"
    )


def _judge(cfg) -> _Judged | None:
    """The kept measurements of ``cfg``'s settings as its time budget will spend them; None
    without one. Under batch size ``auto`` with CPU measurements, at the batch it takes
    (``budget_plan.fit_batch``), each batch's speeds from the measurement of the nearest batch
    (the larger of two as near: a CPU step costs a little more a row in a larger batch)."""
    kept = _read(cfg)
    if (found := _newest(kept)) is None:
        return None
    measured, newest = found
    on_cpu = {
        r["batch"]: r
        for r in kept.values()
        if r.get("on") == "cpu" and _positive_int(r.get("batch"))
    }
    if not (_applies(cfg) and cfg.train.batch_size == AUTO_BATCH and on_cpu):
        return _Judged(measured, newest)

    def nearest(batch: int) -> dict:
        return on_cpu[min(on_cpu, key=lambda b: (abs(b - batch), -b))]

    def speeds_at(batch: int) -> Measured:
        record = nearest(batch)
        return at_batch(_measured(record), record["batch"], batch)

    batch, measured = fit_batch(
        cfg.train.time_budget_s, speeds_at, DEFAULT_BATCH, SMALLEST_AUTO_BATCH
    )
    return _Judged(measured, nearest(batch), batch, speeds_at(DEFAULT_BATCH))


def budget_problems(cfg) -> list[str]:
    """Why ``cfg``'s time budget cannot train a useful number of steps here, from the last
    measurement of these settings ([] when it can, or when none was measured yet). Batch size
    ``auto`` on a CPU is judged at the batch it takes (``auto_batch``)."""
    if not _applies(cfg) or (judged := _judge(cfg)) is None:
        return []
    measured = judged.measured
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    if level != "refuse":
        return []
    return [f"{sentence.rstrip('.')} ({_when(judged.record)}).{_auto_note(judged.batch)}"]


def budget_text(cfg) -> str:
    """What the time budget buys, for Check: the estimate from the last measurement, or how to
    get one ("" without a budget)."""
    if not _applies(cfg):
        return ""
    judged = _judge(cfg)
    if judged is None:
        return (
            "No step time is measured yet for these settings on this machine: **Dry run** "
            "measures start-up, a step and a validation pass, and Check then says how many steps "
            "the budget buys."
        )
    measured = judged.measured
    level, sentence = verdict(estimate(cfg.train.time_budget_s, measured), measured)
    text = ("⚠️ " if level == "refuse" else "") + f"{sentence.rstrip('.')} ({_when(judged.record)})."
    return text + _auto_note(judged.batch)


def _auto_note(batch: int | None) -> str:
    """The sentence that says batch size ``auto`` took fewer rows than ``DEFAULT_BATCH``."""
    if batch is None or batch >= DEFAULT_BATCH:
        return ""
    return (
        f" Batch size auto takes {batch} rows per micro-batch for it: at {DEFAULT_BATCH} "
        f"the budget would buy fewer than {MIN_USEFUL_STEPS} steps."
    )


def _source_at(record: dict) -> tuple[str, str]:
    """What measured ``record`` ("a dry run") and when ("2026-12-06 21:14")."""
    source = SOURCES.get(record.get("source"), quote(record.get("source")))
    return source, time.strftime("%Y-%m-%d %H:%M", time.localtime(record.get("measured_at", 0)))


def _when(record: dict) -> str:
    source, at = _source_at(record)
    return f"measured by {source} of these settings at {at}; a new dry run measures again"
