"""A time budget wired into one training run: the loop asks, the ``Pacer`` decides.

``finetune.train.budget`` holds the decisions (how many steps fit, when the extras run); this
module connects them to a run: the ``Pacer`` built from the run's device, ranks and data, the
plan and learning-rate schedule resized with each of its decisions, and what a checkpoint and
the manifest's ``budget`` record of the seconds spent. Every function here is for a budget
run only, except ``timed``, ``checkpoint_fields`` and ``bought``, which do nothing (or say
nothing) without one, so the loop calls them either way.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from finetune.config import TrainArgs
from finetune.train import parallel
from finetune.train.budget import PROBE_SHARE, Costs, Pacer
from finetune.train.steps import resize_schedule

SPENT_KEY = "budget_spent_s"  # a checkpoint's record of the budget seconds used before it


def make_pacer(t: TrainArgs, t0: float, *, device: str, rank: int, world: int, cadence: dict,
               n_val_batches: int, trainable: int, resumed: dict) -> Pacer:
    """The time budget's pacer: rank 0 times the steps and decides, the other ranks follow.

    Args:
        t: the run's training settings (``time_budget_s`` > 0).
        t0: when the run began; the budget counts from it.
        device: where the steps run (``cuda:N`` syncs before each timing).
        rank: this process's rank; world: how many processes train together.
        cadence: the run's extras, {"validation" / "probes" / "checkpoint": Cadence}.
        n_val_batches: validation batches per pass; trainable: trainable parameters (checkpoint size).
        resumed: the progress read from the checkpoint resumed from ({} for a fresh run).
    """
    sync = device_sync(device)
    agree = functools.partial(parallel.broadcast_object, rank=rank) if world > 1 else None
    costs = Costs(n_val_batches, t.grad_accum, adapter_bytes=4 * trainable,
                  probe_cap=PROBE_SHARE * t.time_budget_s)
    return Pacer(t.time_budget_s, t0, cadence=cadence, costs=costs, spent=resumed.get(SPENT_KEY, 0.0),
                 sync=sync, agree=agree)


def device_sync(device: str):
    """What waits for ``device`` before a step is timed (CUDA work is asynchronous); None off a GPU."""
    return functools.partial(torch.cuda.synchronize, device) if device.startswith("cuda") else None


def timed(pacer: Pacer | None, kind: str):
    """A context timing one extra for the pacer (nothing without a time budget)."""
    return pacer.timed(kind) if pacer else contextlib.nullcontext()


def resize(pacer: Pacer, step: int, total: int, plan, replan, scheduler) -> tuple[int, object]:
    """The plan re-sized after optimizer step ``step``, the schedule resized with it.

    Args:
        plan: the run's ``StepPlan``; replan: ``replan(max_steps=N)`` -> a plan of N steps.
        scheduler: the learning-rate schedule, resized to end with the new plan.

    Returns:
        The planned total (``step``: stop now) and a plan holding at least that many steps.
    """
    new = pacer.after_step(step, total)
    if new != total:
        if new > len(plan):  # more steps than planned so far: more epochs of the same rows
            plan = replan(max_steps=max(new, 2 * len(plan)))
        resize_schedule(scheduler, new)
    return new, plan


def checkpoint_fields(pacer: Pacer | None) -> dict:
    """What a checkpoint keeps of the budget, so a resumed run counts the seconds already spent."""
    return {SPENT_KEY: pacer.spent()} if pacer else {}


def bought(pacer: Pacer | None, plan, step: int, world: int, tokens: int) -> dict | None:
    """What a time budget bought (the manifest's "budget"), or None without one.

    Args:
        plan: the run's ``StepPlan``; step: the optimizer steps taken.
        world: processes that trained together; tokens: real tokens trained on, all ranks.
    """
    if pacer is None:
        return None
    rows = sum(len(m) for s in plan.steps[:step] for m in s) * world  # each rank took its share
    return {"seconds": pacer.seconds, "seconds_used": pacer.spent(), "steps": step,
            "rows_seen": rows, "tokens_seen": tokens, "epochs": step / plan.steps_per_epoch}
