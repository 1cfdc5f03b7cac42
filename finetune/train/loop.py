"""`train(config, on_event=None, stop=None)`: the one training entry point.

The CLI, the supervised child process, the UI and the tests all call this. It runs
``_setup`` -> ``_loop`` -> ``finish.finish``, reporting progress through ``on_event(dict)``. The
loop is a plain PyTorch loop rather than the HF Trainer: it lets the LM head run only on label
positions, packs rows without padding, checks ``stop`` between steps, and syncs with the host
only when it reports (docs/benchmarks.md has the measurements that justify it).

Setup's pieces live in :mod:`finetune.train.setup` and one step's mechanics in
:mod:`finetune.train.steps`; both are shared with ``finetune.train.dryrun``, which times one
step with exactly the model and batches training uses. Under a time budget the loop asks
:mod:`finetune.train.budget_run` (the ``Pacer`` wired into the run) how long the plan is. What
runs between steps (validation, probes, checkpoints) is :mod:`finetune.train.extras`, the save
at the end :mod:`finetune.train.finish`; the ``Run`` they share is in
:mod:`finetune.train.run_state`.
"""

from __future__ import annotations

import functools
import time

import torch

from core.gpu import is_oom, make_scaler
from finetune.config import RunConfig
from finetune.train import (
    allocator,
    batch_fit,
    budget_run,
    compiled,
    extras,
    finish,
    oom,
    parallel,
)
from finetune.train.budget import Cadence
from finetune.train.dryrun import warn_if_too_big
from finetune.train.run_state import Progress, Run, TrainResult
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
)

__all__ = ["ConfigError", "TrainResult", "train"]


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
    return finish.finish(run, progress)


def _setup(cfg: RunConfig, on_event, started: float | None = None) -> Run:
    """Check the config, then load data, model + LoRA, optimizer and batches; resume if asked."""
    from finetune.train.saving import latest_checkpoint, no_checkpoint_note, resume

    t0 = time.time() if started is None else started  # a time budget counts from here
    hw = check_config(cfg)
    rank, world, device = dist_setup(hw.device(cfg.train.device).name)
    emit = functools.partial(_emit, on_event, rank)
    run_dir = run_dir_for(cfg, rank)
    if cfg.run.resume and rank == 0 and latest_checkpoint(run_dir) is None:  # before loading
        emit("warning", message=no_checkpoint_note(run_dir))
    threads = cpu_threads(cfg.train.cpu_threads, device)
    torch.manual_seed(cfg.train.seed)

    resolved, tokenizer, prepared = load_data(cfg, emit)
    train_rows, val_rows = list(prepared.train), list(prepared.val)
    warn_if_too_big(cfg, resolved, prepared, emit)
    sharded = world > 1 and cfg.run.sharding == "fsdp"
    model, targets, packing, step_compiled = _load_model(cfg, resolved, device, sharded, emit)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)  # before wrapping
    pad = tokenizer.pad_token_id
    saved = batch_fit.saved_batch(cfg, run_dir, rank, world)  # a resumed run keeps its batch
    choice = batch_fit.resolve(
        cfg, model, train_rows, pad, packing, device, t0, world=world, sharded=sharded, saved=saved
    )
    if choice is not None:  # batch size "auto": trial steps on a GPU (finetune/train/batch_fit.py)
        emit("status", message=choice.line, batch_size=choice.batch)
        cfg = batch_fit.with_batch(cfg, choice.batch)
    t = cfg.train
    train_model = parallel.wrap(model, world, device, cfg.run.sharding, t.precision)
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    budget = t.time_budget_s > 0  # the plan is sized once the steps are timed (budget.py)
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
    plan = replan(max_steps=0 if budget else t.max_steps)  # under a budget: one epoch so far
    scheduler = build_scheduler(optimizer, t.lr_schedule, t.warmup_ratio, len(plan))
    scaler = make_scaler(device, t.precision)
    start_step, name, before = (
        resume(run_dir, model, optimizer, scheduler, scaler, rank, world, sharded)
        if cfg.run.resume
        else (0, "", {})
    )
    if name:
        emit("status", message=f"resumed from {name} (step {start_step})")
    # a budget's plan so far: a resumed schedule may have grown past one epoch
    total = max(schedule_total(scheduler), start_step) if budget else len(plan)
    resize_schedule(scheduler, total)
    if total > len(plan):
        plan = replan(max_steps=total)
    batch = functools.partial(to_batch, train_rows, pad_id=pad, packing=packing, device=device)
    val_batches = _validation_batches(val_rows, t.batch_size, pad, packing, device)
    run = Run(
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
        batch_choice=choice,
    )
    run.cadence = {
        "validation": Cadence(t.eval_every),
        "probes": Cadence(t.probe_every),
        "checkpoint": Cadence(t.save_every),
    }
    if budget:
        _pace(run, trainable, before)
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
        batch_size=t.batch_size,
        batch_auto=choice is not None,  # chosen by finetune/train/batch_fit.py
        trainable_params=trainable,
        run_dir=str(run_dir),
        data_stats=prepared.stats,
        startup_s=time.time() - t0,
    )
    if run.val_batches and start_step == 0:
        extras.base_validation(run, len(val_rows))
    return run


def _load_model(cfg: RunConfig, resolved, device: str, sharded: bool, emit):
    """``(model, LoRA targets, packing, compiled layers or None)``: the base with its LoRA, the
    decoder layers made to compile in the first step where ``train.compile`` asks (before FSDP
    wraps them: finetune/train/compiled.py)."""
    t = cfg.train
    emit(
        "status",
        message=(
            f"loading {resolved.name} on {device} ({t.precision}, quantization {t.quantization})"
        ),
    )
    compiling = compiled.wanted(t.compile, device, t.quantization, "fsdp" if sharded else "ddp")
    model, targets, packing = load_lora_model(cfg, resolved, device, lean_layers=not compiling)
    step_compiled = compiled.Compiled(model) if compiling else None
    if step_compiled is not None:
        emit("status", message="the decoder layers compile once, during the first step")
    return model, targets, packing, step_compiled


def _validation_batches(rows: list, batch_size: int, pad: int, packing: bool, device) -> list:
    """The held-out rows in batches of ``batch_size``, in their order (every pass the same)."""
    return [
        to_batch(rows, range(i, min(i + batch_size, len(rows))), pad, packing, device)[0]
        for i in range(0, len(rows), batch_size)
    ]


def _pace(run: Run, trainable: int, resumed: dict) -> None:
    """Wire the time budget's ``Pacer`` into ``run`` (a resumed run keeps its held-out rows)."""
    run.val_batches = run.val_batches[: resumed.get(budget_run.VAL_KEY) or len(run.val_batches)]
    run.pacer = budget_run.make_pacer(
        run.cfg.train,
        run.t0,
        device=run.device,
        rank=run.rank,
        world=run.world,
        cadence=run.cadence,
        n_val_batches=len(run.val_batches),
        trainable=trainable,
        resumed=resumed,
    )


def _loop(run: Run, stop) -> Progress:
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
            # A step that compiled is not a step's time; one process only: ranks would differ.
            c = run.compiled
            compiled_now = run.world == 1 and c is not None and c.compiled_last
            total, run.plan = budget_run.resize(
                run.pacer, step, total, run.plan, run.replan, run.scheduler, not compiled_now
            )
            run.total = total
            if short := budget_run.plan_warning(run.pacer, step, total):
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
            extras.between_steps(run, step, total)
    return Progress(
        step, status, split, oom_events, tokens_seen, train_seconds=time.time() - loop_t0
    )


def _forward_backward(run: Run, batches):
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


def _compile_failed(run: Run, why: str) -> None:
    """Compiling failed on the first step: its gradients go, the run trains eagerly."""
    run.optimizer.zero_grad(set_to_none=True)
    run.emit("warning", message=f"compiling the decoder layers failed, training eagerly ({why})")
