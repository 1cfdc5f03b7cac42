"""`train(config, on_event=None, stop=None)`: the one training entry point.

The CLI, the supervised child process, the UI and the tests all call this. It runs
``_setup`` -> ``_loop`` -> ``_finish``, reporting progress through ``on_event(dict)``. The loop is a
plain PyTorch loop rather than the HF Trainer: it lets the LM head run only on label positions,
packs rows without padding, checks ``stop`` between steps, and syncs with the host only when it
reports (docs/benchmarks.md has the measurements that justify it).

Setup's pieces live in :mod:`finetune.train.setup` and one step's mechanics in
:mod:`finetune.train.steps`; both are shared with ``finetune.train.dryrun``, which times one
step with exactly the model and batches training uses. Under a time budget the loop asks
:mod:`finetune.train.budget_run` (the ``Pacer`` wired into the run) how long the plan is.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.gpu import is_oom, make_scaler
from finetune.config import RunConfig
from finetune.train import allocator, budget_run, compiled, oom, parallel
from finetune.train.budget import Cadence
from finetune.train.budget_plan import VALIDATION_PASS_SHARE
from finetune.train.dryrun import warn_if_too_big
from finetune.train.setup import (
    ConfigError,
    check_config,
    cpu_threads,
    dist_setup,
    load_data,
    load_lora_model,
    run_dir_for,
    to_batch,
)
from finetune.train.steps import (
    build_optimizer,
    build_scheduler,
    forward_backward,
    make_autocast,
    optimizer_step,
    peak_memory_gib,
    plan_steps,
    resize_schedule,
    schedule_total,
    validation_loss,
)

__all__ = ["ConfigError", "TrainResult", "train"]


UNTRAINED_NOTE = (
    "no optimizer step was taken: the saved adapter's LoRA update is still "
    "zero, so it answers exactly as the base model"
)


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
class _Run:
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


@dataclass
class _Progress:
    """Where the loop ended: the finish saves and reports from this."""

    step: int
    status: str  # "done" or "stopped"
    split: int  # >1 after a CUDA out-of-memory: micro-batches were split
    oom_events: list  # {"step", "micro_batch"} per split
    tokens_seen: int
    train_seconds: float


def _emit(on_event, rank: int, kind: str, **data) -> None:
    if on_event is not None and rank == 0:
        on_event({"type": kind, "time": time.time(), **data})


def _should_stop(stop, world: int = 1, device: str = "cpu") -> bool:
    """Whether to stop now; under DDP any rank asking stops all (they must run the same steps)."""
    asked = stop is not None and (stop.is_set() if hasattr(stop, "is_set") else bool(stop()))
    if world == 1:
        return asked
    import torch.distributed as dist

    flag = torch.tensor([int(asked)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def train(cfg: RunConfig, on_event=None, stop=None, started: float | None = None) -> TrainResult:
    """Fine-tune a LoRA adapter and save it on the shelf.

    Args:
        cfg: the full run configuration (validated here first; nothing loads if it is bad).
        on_event: called with a dict per event: status, warning, start, progress, eval, probe,
            checkpoint, saved, done.
        stop: a ``threading.Event`` or a callable returning True to finish the current step,
            save the adapter and return.
        started: when the run began (``time.time()``; default: now). A time budget counts from
            it: the CLI passes its process's start, so the imports come out of the budget too.

    Returns:
        Where the adapter was saved, whether the run finished or was stopped, and metrics.

    Raises:
        ConfigError: every problem with the settings, before anything is loaded.
        OSError: the home folder cannot take writes (named in the message).
    """
    run = _setup(cfg, on_event, started)
    progress = _loop(run, stop)
    return _finish(run, progress)


def _setup(cfg: RunConfig, on_event, started: float | None = None) -> _Run:
    """Check the config, then load data, model + LoRA, optimizer and batches; resume if asked."""
    from finetune.train.saving import resume

    t0 = time.time() if started is None else started  # a time budget counts from here
    hw = check_config(cfg)
    t = cfg.train
    rank, world, device = dist_setup(hw.device(t.device).name)
    emit = functools.partial(_emit, on_event, rank)
    run_dir = run_dir_for(cfg, rank)
    threads = cpu_threads(t.cpu_threads, device)
    torch.manual_seed(t.seed)

    resolved, tokenizer, prepared = load_data(cfg, emit)
    train_rows, val_rows = list(prepared.train), list(prepared.val)
    warn_if_too_big(cfg, resolved, prepared, emit)
    emit(
        "status",
        message=(
            f"loading {resolved.name} on {device} ({t.precision}, quantization {t.quantization})"
        ),
    )
    sharded = world > 1 and cfg.run.sharding == "fsdp"
    compiling = compiled.wanted(t.compile, device, t.quantization, "fsdp" if sharded else "ddp")
    model, targets, packing = load_lora_model(cfg, resolved, device, lean_layers=not compiling)
    # Before FSDP wraps the layers; the first step compiles them (finetune/train/compiled.py).
    step_compiled = compiled.Compiled(model) if compiling else None
    if step_compiled is not None:
        emit("status", message="the decoder layers compile once, during the first step")
    train_model = parallel.wrap(
        model, world, device, cfg.run.sharding, t.precision
    )  # before the optimizer
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    budget = (
        t.time_budget_s > 0
    )  # the plan is sized once the steps are timed (finetune/train/budget.py)
    replan = functools.partial(
        plan_steps,
        [len(r["input_ids"]) for r in train_rows],
        t.batch_size,
        t.grad_accum,
        1.0 if budget else t.epochs,
        seed=t.seed,
        group_by_length=not packing,
        world_size=world,
        rank=rank,
    )
    plan = replan(
        max_steps=0 if budget else t.max_steps
    )  # under a budget: one epoch until measured
    scheduler = build_scheduler(optimizer, t.lr_schedule, t.warmup_ratio, len(plan))
    scaler = make_scaler(device, t.precision)
    start_step, name, before = (
        resume(run_dir, model, optimizer, scheduler, scaler, rank, world, sharded)
        if cfg.run.resume
        else (0, "", {})
    )
    if name:
        emit("status", message=f"resumed from {name} (step {start_step})")
    total = (
        max(schedule_total(scheduler), start_step) if budget else len(plan)
    )  # a budget's plan so far
    resize_schedule(scheduler, total)
    if total > len(plan):
        plan = replan(max_steps=total)
    batch = functools.partial(
        to_batch, train_rows, pad_id=tokenizer.pad_token_id, packing=packing, device=device
    )
    val_batches = [
        to_batch(
            val_rows,
            range(i, min(i + t.batch_size, len(val_rows))),
            tokenizer.pad_token_id,
            packing,
            device,
        )[0]
        for i in range(0, len(val_rows), t.batch_size)
    ]
    run = _Run(
        cfg,
        emit,
        rank,
        world,
        device,
        run_dir,
        t0,
        resolved,
        tokenizer,
        prepared,
        model,
        train_model,
        targets,
        packing,
        optimizer,
        scheduler,
        scaler,
        make_autocast(device, t.precision),
        plan,
        batch,
        val_batches,
        start_step,
        sharded,
        total=total,
        replan=replan,
        tokens=before.get("tokens_seen", 0),
        compiled=step_compiled,
    )
    run.cadence = {
        "validation": Cadence(t.eval_every),
        "probes": Cadence(t.probe_every),
        "checkpoint": Cadence(t.save_every),
    }
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if budget:
        run.val_batches = val_batches[
            : before.get(budget_run.VAL_KEY) or len(val_batches)
        ]  # a resume's rows
        run.pacer = budget_run.make_pacer(
            t,
            t0,
            device=device,
            rank=rank,
            world=world,
            cadence=run.cadence,
            n_val_batches=len(run.val_batches),
            trainable=trainable,
            resumed=before,
        )
    emit(
        "start",
        total_steps=total,
        start_step=start_step,
        train_rows=len(train_rows),
        val_rows=len(val_rows),
        device=device,
        threads=threads,
        malloc=allocator.in_use(),
        packing=packing,
        targets=targets,
        time_budget_s=t.time_budget_s,
        trainable_params=trainable,
        run_dir=str(run_dir),
        data_stats=prepared.stats,
        startup_s=time.time() - t0,
    )
    if run.val_batches and start_step == 0:
        _base_validation(run, len(val_rows))
    return run


def _base_validation(run: _Run, val_rows: int) -> None:
    """The base model's validation loss; under a time budget on the rows one pass affords."""
    with compiled.eager_if(run.compiled):
        _base_validation_pass(run, val_rows)


def _base_validation_pass(run: _Run, val_rows: int) -> None:
    if run.pacer is None:
        base_loss = validation_loss(run.model, run.val_batches, run.autocast)
    else:
        # sized to the budget: every later pass runs on the same rows (budget_run.base_validation)
        before = len(run.val_batches)
        base_loss, run.val_batches = budget_run.base_validation(
            run.model, run.val_batches, run.autocast, run.pacer
        )
        if len(run.val_batches) < before:
            kept = min(
                val_rows, len(run.val_batches) * run.cfg.train.batch_size
            )  # packed batches hold one row
            run.emit(
                "status",
                message=f"validating on {kept} of {val_rows} held-out rows: a pass of all of them "
                f"would take more than {VALIDATION_PASS_SHARE:.0%} of the time budget",
            )
    run.metrics.update(base_val_loss=base_loss, base_val_perplexity=math.exp(base_loss))
    run.emit("eval", step=0, val_loss=base_loss, val_perplexity=math.exp(base_loss))


def _loop(run: _Run, stop) -> _Progress:
    """Optimizer steps until the plan ends or ``stop`` asks; OOM on CUDA splits the step."""
    t, emit, metrics, total = run.cfg.train, run.emit, run.metrics, run.total
    model, optimizer, scheduler, scaler = run.model, run.optimizer, run.scheduler, run.scaler
    world, device, start_step = run.world, run.device, run.start_step
    model.train()
    split = 1  # >1 after a CUDA out-of-memory: micro-batches are split, accumulation grows
    oom_events = []
    loop_t0, tokens_seen, loss_acc, loss_tokens = time.time(), 0, torch.zeros((), device=device), 0
    step, status = start_step, "done"
    if run.pacer:
        run.pacer.start()
    while step < total:
        if _should_stop(stop, world, device):
            status = "stopped"
            break
        micro = [m[j::split] for m in run.plan.steps[step] for j in range(split) if m[j::split]]
        batches = [run.batch(m) for m in micro]
        try:
            s, n_real = _forward_backward(run, batches)
            failed = False
        except RuntimeError as err:  # torch.OutOfMemoryError, or cuBLAS failing to allocate
            if not is_oom(err):
                raise
            if run.sharded:
                raise oom.fsdp_oom(t.batch_size) from err
            failed = True
        if (
            world > 1 and not run.sharded
        ):  # every rank retries the step together, or none does (oom.py)
            failed = oom.any_rank(failed, device)
            if not failed:
                oom.average_gradients(model, world)
        if failed:
            # Outside the except block, so the failed step's activations are already freed.
            # A retried step must not count twice: totals are added only after success.
            split = oom.after_oom(optimizer, split, step, t.batch_size, oom_events, emit, device)
            continue
        loss_acc += s
        loss_tokens += sum(nl for _, nl, _ in batches)
        tokens_seen += n_real
        run.tokens += n_real * world
        grad_norm = oom.optimizer_step_with_retry(
            lambda: optimizer_step(model, optimizer, scheduler, scaler, t.max_grad_norm),
            device,
            not run.sharded,
        )
        step += 1
        if run.pacer:  # a time budget re-sizes the plan from the measured step times
            settled = run.pacer.settled
            total, run.plan = budget_run.resize(
                run.pacer, step, total, run.plan, run.replan, run.scheduler
            )
            run.total = total
            if (
                run.pacer.settled
                and not settled
                and (short := budget_run.plan_warning(run.pacer, total))
            ):
                emit("warning", message=short)
        # Under a budget a fast GPU runs thousands of steps: a few hundred
        # progress events say enough.
        log_every = max(t.log_every, total // 500) if run.pacer else t.log_every
        if step % log_every == 0 or step == total:
            elapsed = time.time() - loop_t0
            eta = run.pacer.left() if run.pacer else elapsed / (step - start_step) * (total - step)
            log = dict(
                step=step,
                total_steps=total,
                epoch=step / run.plan.steps_per_epoch,
                loss=float(loss_acc) / max(loss_tokens, 1),
                lr=scheduler.get_last_lr()[0],
                grad_norm=float(grad_norm),
                tokens_per_second=tokens_seen * world / max(elapsed, 1e-9),
                elapsed=time.time() - run.t0,
                eta=eta,
                peak_memory_gib=peak_memory_gib(device),
            )
            if run.compiled is not None and run.compiled.first_s is not None:
                log["compile_s"] = run.compiled.first_s  # the first step, compiling included
            emit("progress", **log)
            metrics["train_loss"] = log["loss"]
            loss_acc.zero_()
            loss_tokens = 0
        if step < total:
            _between_steps(run, step, total)
    return _Progress(
        step, status, split, oom_events, tokens_seen, train_seconds=time.time() - loop_t0
    )


def _forward_backward(run: _Run, batches):
    """One step's gradients, through the compiled layers when the run compiles them."""

    def step():
        return forward_backward(
            run.train_model,
            batches,
            run.autocast,
            run.scaler,
            sync=run.world == 1 or run.sharded,
        )

    c = run.compiled
    if c is None:
        return step()
    first = c.calls == 0 and not c.failed
    c.shapes.update(tuple(b["input_ids"].shape) for b, _, _ in batches)
    out = c.step(step, lambda why: _compile_failed(run, why))
    if first and not c.failed:
        run.emit(
            "status",
            message=f"first step in {c.first_s:.1f} s, compiling the decoder layers included",
            compile_s=c.first_s,
        )
    return out


def _compile_failed(run: _Run, why: str) -> None:
    """Compiling failed on the first step: its gradients go, the run trains eagerly."""
    run.optimizer.zero_grad(set_to_none=True)
    run.emit("warning", message=f"compiling the decoder layers failed, training eagerly ({why})")


def _between_steps(run: _Run, step: int, total: int) -> None:
    """The periodic extras of a step that is not the last: validation, probe answers, checkpoint
    (every N steps, or on "auto" at fixed shares of the planned steps: ``budget.Cadence``)."""
    emit, cadence = run.emit, run.cadence
    hold = run.pacer is not None and not run.pacer.settled  # auto extras wait for a sized plan
    if cadence["validation"].due(step, total, hold) and run.val_batches:
        with budget_run.timed(run.pacer, "validation"):
            vl = _validation(run)
        if vl is not None:
            emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    if cadence["probes"].due(step, total, hold):
        with budget_run.timed(run.pacer, "probes"):
            answers = _probes(run, max_time=run.pacer.probe_seconds() if run.pacer else None)
        if answers is not None:
            emit("probe", step=step, answers=answers)
    if cadence["checkpoint"].due(step, total, hold):
        with budget_run.timed(run.pacer, "checkpoint"):
            _checkpoint(run, step)


def _validation(run: _Run) -> float | None:
    """Mean validation loss on every rank, or None when it ran out of memory (not under FSDP)."""

    def passes():
        with compiled.eager_if(run.compiled):
            return validation_loss(run.model, run.val_batches, run.autocast)

    return oom.skip_on_oom(
        passes,
        "validation",
        run.device,
        run.emit,
        recover=not run.sharded,
    )


def _probes(run: _Run, max_time: float | None = None) -> list | None:
    """Probe answers on rank 0 (on every rank under FSDP, where generating is collective),
    generating for at most ``max_time`` seconds when given."""
    from finetune.train.probes import answer_probes

    if run.rank != 0 and not run.sharded:
        return None

    def answers():
        with compiled.eager_if(run.compiled):  # generate's KV cache grows at every token
            return answer_probes(
                run.model,
                run.tokenizer,
                run.cfg.data.system_prompt,
                synced=run.sharded,
                max_time=max_time,
            )

    return oom.skip_on_oom(
        answers,
        "probes",
        run.device,
        run.emit,
        recover=not run.sharded,
    )


def _final_probes(run: _Run) -> list:
    """The last probe answers; under a time budget only in the time left before the save."""
    if run.pacer is None:
        return _probes(run) or []
    seconds = run.pacer.probe_seconds(final=True)
    return (_probes(run, max_time=seconds) or []) if seconds else []


def _checkpoint(run: _Run, step: int) -> None:
    """Rank 0 writes a checkpoint; under FSDP every rank first helps gather the whole state."""
    from finetune.train.saving import save_checkpoint

    sharded = (
        (
            parallel.full_trainable_state(run.model),
            parallel.full_optimizer_state(run.model, run.optimizer),
        )
        if run.sharded
        else None
    )
    progress = {"tokens_seen": run.tokens, **budget_run.checkpoint_fields(run.pacer)}
    if run.rank == 0:
        save_checkpoint(
            run.run_dir,
            step,
            run.model,
            run.optimizer,
            run.scheduler,
            scaler=run.scaler,
            sharded=sharded,
            progress=progress,
        )
        run.emit("checkpoint", step=step)


def _finish(run: _Run, progress: _Progress) -> TrainResult:
    """Final validation and probes, then rank 0 saves the adapter with its manifest."""
    from finetune.train.past_answers import shelve_or_warn
    from finetune.train.saving import adapter_name_for, build_manifest, save_adapter

    cfg, emit, metrics, t, dc = run.cfg, run.emit, run.metrics, run.cfg.train, run.cfg.data
    model, tokenizer, val_batches = run.model, run.tokenizer, run.val_batches
    rank, world, device, t0 = run.rank, run.world, run.device, run.t0
    step, status, split, train_seconds = (
        progress.step,
        progress.status,
        progress.split,
        progress.train_seconds,
    )
    with budget_run.timed(run.pacer, "validation"):
        vl = (
            _validation(run)
            if val_batches and budget_run.final_validation_fits(run.pacer, emit)
            else None
        )
    if vl is not None:
        metrics.update(val_loss=vl, val_perplexity=math.exp(vl))
        emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    with budget_run.timed(run.pacer, "probes"):
        adapter_dir, probes = None, _final_probes(run)
    bought = budget_run.bought(run.pacer, run.plan, step, world, run.tokens)
    note = (bought or {}).get("note", "")
    if (
        step == 0
    ):  # stopped before its first update: no quiet "stopped" for an adapter equal to the base
        note = "; ".join(filter(None, [UNTRAINED_NOTE, note]))
    weights = parallel.full_trainable_state(model) if run.sharded else None  # every rank takes part
    if rank == 0:
        emit("probe", step=step, answers=probes)
        name = adapter_name_for(cfg.run.adapter_name, dc.path)
        knowledge = shelve_or_warn(run.prepared, dc.path, emit)  # the answers it may be shown
        manifest = build_manifest(
            cfg,
            run.resolved,
            tokenizer,
            run.prepared,
            status=status,
            steps=step,
            total_steps=run.total,
            targets=run.targets,
            training={
                "device": device,
                "packing": run.packing,
                "world_size": world,
                "sharding": cfg.run.sharding,
                "oom_retries": progress.oom_events,
                "effective_micro_batch": max(1, t.batch_size // split),
                **compiled.record(run.compiled),
            },
            metrics=metrics,
            probes=probes,
            run_dir=run.run_dir,
            timings={
                "train_seconds": train_seconds,
                "total_seconds": time.time() - t0,
                "tokens_per_second": progress.tokens_seen * world / max(train_seconds, 1e-9),
            },
            budget=bought,
            knowledge=knowledge,
        )
        adapter_dir = save_adapter(model, tokenizer, name, manifest, state_dict=weights)
        emit("saved", adapter=adapter_dir.name, path=str(adapter_dir), status=status)
        budget_run.record_speeds(run.pacer, cfg)
    if note:
        emit("warning", message=note)
    emit(
        "done",
        status=status,
        step=step,
        total_steps=run.total,
        metrics=metrics,
        adapter=adapter_dir.name if adapter_dir else None,
        **({"note": note} if note else {}),
    )
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # the other ranks wait while rank 0 writes the adapter
        dist.destroy_process_group()
    return TrainResult(
        adapter_dir=adapter_dir, status=status, steps=step, metrics=metrics, note=note
    )
