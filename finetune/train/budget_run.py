"""A time budget wired into one training run: the loop asks, the ``Pacer`` decides.

``finetune.train.budget`` holds the decisions (how many steps fit, when the extras run); this
module connects them to a run: the ``Pacer`` built from the run's device, ranks and data, the
plan and learning-rate schedule resized with each of its decisions, and what a checkpoint and
the manifest's ``budget`` record of the seconds spent. Every function here is for a budget
run only, except ``timed``, ``checkpoint_fields`` and ``bought``, which do nothing (or say
nothing) without one, so the loop calls them either way.

The base model's validation pass is sized here too (``base_validation``): timed batch by batch,
it keeps the batches one pass of the budget affords (``finetune.train.budget_plan``), and every
later pass runs on the same rows, so base and final losses compare.
"""

from __future__ import annotations

import contextlib
import functools
import time

import torch

from finetune.config import TrainArgs
from finetune.train import budget_plan, parallel
from finetune.train.budget import PROBE_SHARE, Costs, Pacer
from finetune.train.steps import loss_sum, no_grad, resize_schedule

SPENT_KEY = "budget_spent_s"  # a checkpoint's record of the budget seconds used before it
VAL_KEY = "budget_val_batches"  # ... and of the validation batches its passes keep


def make_pacer(
    t: TrainArgs,
    t0: float,
    *,
    device: str,
    rank: int,
    world: int,
    cadence: dict,
    n_val_batches: int,
    trainable: int,
    resumed: dict,
) -> Pacer:
    """The time budget's pacer: rank 0 times the steps and decides, the other ranks follow.

    Args:
        t: the run's training settings (``time_budget_s`` > 0).
        t0: when the run began; the budget counts from it.
        device: where the steps run (``cuda:N`` syncs before each timing).
        rank: this process's rank; world: how many processes train together.
        cadence: the run's extras, {"validation" / "probes" / "checkpoint": Cadence}.
        n_val_batches: validation batches per pass; trainable: trainable
            parameters (checkpoint size).
        resumed: the progress read from the checkpoint resumed from ({} for a fresh run).
    """
    sync = device_sync(device)
    agree = functools.partial(parallel.broadcast_object, rank=rank) if world > 1 else None
    costs = Costs(
        n_val_batches,
        t.grad_accum,
        adapter_bytes=4 * trainable,
        probe_cap=PROBE_SHARE * t.time_budget_s,
    )
    return Pacer(
        t.time_budget_s,
        t0,
        cadence=cadence,
        costs=costs,
        spent=resumed.get(SPENT_KEY, 0.0),
        sync=sync,
        agree=agree,
    )


def device_sync(device: str):
    """What waits for ``device`` before a step is timed (CUDA work is
    asynchronous); None off a GPU."""
    return functools.partial(torch.cuda.synchronize, device) if device.startswith("cuda") else None


def timed(pacer: Pacer | None, kind: str):
    """A context timing one extra for the pacer (nothing without a time budget)."""
    return pacer.timed(kind) if pacer else contextlib.nullcontext()


def resize(
    pacer: Pacer, step: int, total: int, plan, replan, scheduler, trusted: bool = True
) -> tuple[int, object]:
    """The plan re-sized after optimizer step ``step``, the schedule resized with it.

    Args:
        plan: the run's ``StepPlan``; replan: ``replan(max_steps=N)`` -> a plan of N steps.
        scheduler: the learning-rate schedule, resized to end with the new plan.
        trusted: False for a step that compiled (``Pacer.after_step``).

    Returns:
        The planned total (``step``: stop now) and a plan holding at least that many steps.
    """
    new = pacer.after_step(step, total, trusted)
    if new != total:
        if new > len(plan):  # more steps than planned so far: more epochs of the same rows
            plan = replan(max_steps=max(new, 2 * len(plan)))
        resize_schedule(scheduler, new)
    return new, plan


def base_validation(model, batches: list, autocast, pacer: Pacer) -> tuple[float, list]:
    """The base model's validation loss on the batches one pass of the budget affords.

    The first batch is timed: when it alone takes more than a whole pass affords, the pass is that
    batch. Otherwise the second batch's time (the first also warmed the device up) sizes the pass
    (``budget_plan.validation_batches``), rank 0 deciding for all ranks. The pacer learns the
    pass's cost from it and, from then on, prices the shorter pass.

    Returns:
        The mean loss per label token over the kept batches, and those batches.
    """
    total, count, keep, per, began = 0.0, 0, len(batches), 0.0, time.time()
    was_training = model.training
    model.eval()
    with no_grad(model):
        for i, batch in enumerate(batches):
            if i == keep:
                break
            t = time.time()
            with autocast() if autocast else contextlib.nullcontext():
                s, n = loss_sum(model, batch)
            total, count = total + float(s), count + int(n)  # float() waits for the device
            per = time.time() - t
            if i == 0 and per > budget_plan.VALIDATION_PASS_SHARE * pacer.seconds:
                keep = (
                    1  # the first batch alone, warm-up and all, took more than a whole pass affords
                )
            elif i == 1:  # warm now: this batch's time sizes the pass
                keep = max(2, budget_plan.validation_batches(pacer.seconds, per, len(batches)))
            if i <= 1:
                keep = pacer.agree(keep) if pacer.agree is not None else keep
    model.train(was_training)
    pacer.costs.n_val_batches = keep
    pacer.costs.seen["validation"] = per * keep  # a warm pass (the first batch paid for warming up)
    pacer.base_validation_s = time.time() - began
    pacer.totals["validation"] = pacer.totals.get("validation", 0.0) + pacer.base_validation_s
    return total / max(count, 1), batches[:keep]


def final_validation_fits(pacer: Pacer | None, emit) -> bool:
    """Whether the final validation pass fits in the time the budget has left (always without a
    budget). A step far slower than measured, or a start-up that ate the budget, leaves none: the
    run then saves without it rather than overrun by a whole pass, and says so."""
    if pacer is None:
        return True
    cost = pacer.costs.of("validation", pacer.seconds_per_step())
    fits = pacer.left() >= cost
    fits = pacer.agree(fits) if pacer.agree is not None else fits
    if not fits:
        emit(
            "status",
            message=f"no time left in the budget for the final validation (a pass takes about "
            f"{cost:.0f} s, {pacer.left():.0f} s are left): the adapter is saved without it",
        )
    return fits


def plan_warning(pacer: Pacer, step: int, total: int) -> str:
    """A sentence for a plan of fewer than ``MIN_USEFUL_STEPS`` steps: where the budget went so
    far, and what to change. Judged once, at the first step past a quarter of the plan on
    settled speeds ("" before, after, and for a longer plan): the first steps at each new row
    length run slower than the rest, so a plan judged as soon as it settled can grow past the
    floor by the end."""
    if pacer.plan_judged or not pacer.settled or step < total / 4:
        return ""
    pacer.plan_judged = True
    if total >= budget_plan.MIN_USEFUL_STEPS:
        return ""
    parts = spent_parts(pacer)
    return (
        f"this {pacer.seconds / 60:g}-minute budget leaves time for about {total} steps, fewer "
        f"than the {budget_plan.MIN_USEFUL_STEPS} a useful run needs (start-up took "
        f"{parts['startup_s']:.0f} s, the base validation {pacer.base_validation_s:.0f} s, a "
        f"step takes {pacer.seconds_per_step():.1f} s); it trains them and saves the adapter: "
        "give a longer budget, or a smaller batch or max length"
    )


def checkpoint_fields(pacer: Pacer | None) -> dict:
    """What a checkpoint keeps of the budget, so a resumed run counts the seconds already spent
    and validates on the same rows."""
    return {SPENT_KEY: pacer.spent(), VAL_KEY: pacer.costs.n_val_batches} if pacer else {}


def bought(pacer: Pacer | None, plan, step: int, world: int, tokens: int) -> dict | None:
    """What a time budget bought (the manifest's "budget"), or None without one.

    Args:
        plan: the run's ``StepPlan``; step: the optimizer steps taken.
        world: processes that trained together; tokens: real tokens trained on, all ranks.
    """
    if pacer is None:
        return None
    rows = sum(len(m) for s in plan.steps[:step] for m in s) * world  # each rank took its share
    parts = spent_parts(pacer)
    note = budget_plan.short_run_note(pacer.seconds, step, parts)
    return {
        "seconds": pacer.seconds,
        "seconds_used": pacer.spent(),
        "steps": step,
        "rows_seen": rows,
        "tokens_seen": tokens,
        "epochs": step / plan.steps_per_epoch,
        "val_batches": pacer.costs.n_val_batches,
        **{k: round(v, 3) for k, v in parts.items()},
        **({"note": note} if note else {}),
    }


def spent_parts(pacer: Pacer) -> dict:
    """Where this session's seconds went: start-up (process start to the first step, the base
    validation aside), validation, probe answers, checkpoints, and the steps themselves."""
    now, totals = time.time(), pacer.totals
    began = pacer.steps_began or now
    base = pacer.base_validation_s
    extras = sum(totals.values()) - base
    return {
        "startup_s": began - pacer.t0 - base,
        "validation_s": totals.get("validation", 0.0),
        "probes_s": totals.get("probes", 0.0),
        "checkpoints_s": totals.get("checkpoint", 0.0),
        "train_s": max(0.0, now - began - extras),
    }


def record_speeds(pacer: Pacer | None, cfg, batch: int, device: str) -> None:
    """Keep what this budget run measured (start-up, a step, a validation batch) at ``batch``
    rows per micro-batch on ``device`` for the next check of the same settings ``cfg``
    (``finetune.train.speed_record``); nothing without a budget or a step."""
    from finetune.train.speed_record import save

    if pacer is None or pacer.first is None:  # no step was timed
        return
    batches = pacer.costs.n_val_batches
    val_batch_s = pacer.costs.seen.get("validation", 0.0) / batches if batches else 0.0
    save(
        cfg,
        budget_plan.Measured(
            spent_parts(pacer)["startup_s"],
            pacer.seconds_per_step(),
            val_batch_s,
            pacer.val_batches_all,
        ),
        "run",
        batch,
        device,
    )
