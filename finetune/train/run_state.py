"""What one training run carries from setup through the loop to the finish, and what it returns.

``Run`` is built by ``finetune.train.loop``'s setup; the loop, the extras between steps
(``finetune.train.extras``) and the finish (``finetune.train.finish``) read and update it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from finetune.config import RunConfig

UNTRAINED_NOTE = (
    "no optimizer step was taken: the saved adapter's LoRA update is still "
    "zero, so it answers exactly as the base model"
)

NOTHING_SAVED = "stopped before training began: nothing to save"


@dataclass
class TrainResult:
    adapter_dir: Path | None
    status: str  # "done" or "stopped"
    steps: int
    metrics: dict = field(default_factory=dict)
    note: str = (
        ""  # a budget run that bought too few steps to be useful says so here ("" otherwise)
    )


@dataclass
class Run:
    """What setup builds for the loop and the finish: the model, its data and its optimizer."""

    cfg: RunConfig
    emit: object  # emit(kind, **data): an event on rank 0
    rank: int
    world: int
    device: str
    run_dir: Path
    t0: float  # when train() was called
    resolved: object  # core.models.ResolvedModel
    tokenizer: object
    prepared: object  # finetune.data.PreparedData
    model: object  # the PEFT model (what is saved)
    train_model: (
        object  # the model (sharded in place under FSDP), or its DDP wrapper (what is stepped)
    )
    targets: list
    packing: bool
    optimizer: object
    scheduler: object
    scaler: object  # a GradScaler for fp16 on CUDA, else None
    autocast: object  # a context factory, or None for fp32
    plan: object  # finetune.train.steps.StepPlan
    batch: object  # batch(indices) -> the micro-batches of those training rows
    val_batches: list
    start_step: int
    sharded: bool = False  # FSDP: every rank runs the model together, no OOM split (parallel.py)
    metrics: dict = field(default_factory=dict)
    total: int = 0  # planned optimizer steps (a time budget resizes it; plan may hold more)
    replan: object = None  # replan(max_steps=N) -> a StepPlan of N steps (the same first ones)
    pacer: object = None  # finetune.train.budget.Pacer under a time budget, else None
    cadence: dict = field(
        default_factory=dict
    )  # "validation" / "probes" / "checkpoint" -> budget.Cadence
    tokens: int = 0  # real tokens trained on, all ranks, earlier sessions of a resumed run included
    compiled: object = None  # finetune.train.compiled.Compiled when the step runs compiled
    batch_choice: object = None  # finetune.train.batch_fit.Choice when the batch size was auto


@dataclass
class Progress:
    """Where the loop ended: the finish saves and reports from this."""

    step: int
    status: str  # "done" or "stopped"
    split: int  # >1 after a CUDA out-of-memory: micro-batches were split
    oom_events: list  # {"step", "micro_batch"} per split
    tokens_seen: int
    train_seconds: float
