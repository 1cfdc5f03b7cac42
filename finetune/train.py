"""`train(config, on_event=None, stop=None)`: the one training entry point.

The CLI, the supervised child process, the UI and the tests all call this. It runs
setup -> loop -> save, reporting progress through ``on_event(dict)``. The loop is a plain
PyTorch loop rather than the HF Trainer: it lets the LM head run only on label positions,
packs rows without padding, checks ``stop`` between steps, and syncs with the host only
when it reports (docs/benchmarks.md has the measurements that justify it).

Setup lives in :mod:`finetune.run_setup`; it and :func:`forward_backward` are shared with
``finetune.dryrun``, which times one step with exactly the model and batches training uses.
"""

from __future__ import annotations

import contextlib
import functools
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from finetune import allocator, oom
from finetune.config import RunConfig
from finetune.gpu import is_oom, make_scaler, release_memory
from finetune.run_setup import (
    ConfigError,
    check_config,
    cpu_threads,
    dist_setup,
    load_data,
    load_lora_model,
    run_dir_for,
    to_batch,
)
from finetune.steps import build_optimizer, build_scheduler, loss_sum, plan_steps, validation_loss

__all__ = ["ConfigError", "TrainResult", "forward_backward", "train"]


@dataclass
class TrainResult:
    adapter_dir: Path | None
    status: str  # "done" or "stopped"
    steps: int
    metrics: dict = field(default_factory=dict)


def _emit(on_event, rank: int, kind: str, **data) -> None:
    if on_event is not None and rank == 0:
        on_event({"type": kind, "time": time.time(), **data})


def _peak_memory_gib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _should_stop(stop, world: int = 1, device: str = "cpu") -> bool:
    """Whether to stop now; under DDP any rank asking stops all (they must run the same steps)."""
    asked = stop is not None and (stop.is_set() if hasattr(stop, "is_set") else bool(stop()))
    if world == 1:
        return asked
    import torch.distributed as dist

    flag = torch.tensor([int(asked)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _autocast(device: str, precision: str):
    if precision == "fp32":
        return None
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return lambda: torch.autocast(kind, dtype=dtype)


def forward_backward(train_model, batches, autocast=None, scaler=None, sync: bool = True) -> tuple[torch.Tensor, int]:
    """Accumulate the gradients of one optimizer step over its micro-batches.

    The loss is the mean over the whole step's label tokens (so splitting a step into more
    micro-batches leaves the gradient unchanged); under DDP the gradients are all-reduced
    once, after the last micro-batch, and then averaged over ranks; with ``sync=False`` not at
    all (the caller averages them, see ``finetune.oom``).

    Returns:
        The summed loss (a detached device tensor) and the number of real tokens.
    """
    n_label = max(sum(nl for _, nl, _ in batches), 1)
    total, n_real = 0, 0
    for i, (b, _, real) in enumerate(batches):
        last = i == len(batches) - 1 and sync
        local = train_model.no_sync() if not last and hasattr(train_model, "no_sync") else contextlib.nullcontext()
        with local:
            with autocast() if autocast else contextlib.nullcontext():
                s, _ = loss_sum(train_model, b)
            loss = s / n_label
            (scaler.scale(loss) if scaler else loss).backward()
        total, n_real = total + s.detach(), n_real + real
    return total, n_real


def _optimizer_step(model, optimizer, scheduler, scaler, max_grad_norm: float) -> torch.Tensor:
    if scaler:
        scaler.unscale_(optimizer)
    params = model.parameters()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm) if max_grad_norm > 0 else torch.zeros(())
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


def _warn_if_too_big(cfg: RunConfig, resolved, prepared, emit) -> None:
    """A "warning" event when the memory estimate exceeds the device (training still starts)."""
    from finetune.dryrun import estimate_memory, label_share

    try:
        est = estimate_memory(cfg, resolved, label_share=label_share(prepared.train))
    except (ValueError, OSError, RuntimeError, AttributeError) as err:  # unusual configs: no estimate
        emit("status", message=f"memory estimate unavailable: {err}")
        return
    if not est["fits"]:
        emit("warning", message=est["warning"], estimate=est)


def _after_oom(optimizer, split: int, step: int, batch_size: int, oom_events: list, emit, device: str) -> int:
    """Drop the partial step's gradients and split its micro-batches in two (raises at 64)."""
    optimizer.zero_grad(set_to_none=True)
    release_memory(device)
    if split >= 64:
        raise torch.OutOfMemoryError(f"out of memory even with micro-batches of 1 (batch size {batch_size})")
    split *= 2
    micro = max(1, batch_size // split)
    oom_events.append({"step": step, "micro_batch": micro})
    emit("status", message=f"CUDA out of memory: micro-batch now {micro}, accumulation x{split}")
    return split


def train(cfg: RunConfig, on_event=None, stop=None) -> TrainResult:
    """Fine-tune a LoRA adapter and save it on the shelf.

    Args:
        cfg: the full run configuration (validated here first; nothing loads if it is bad).
        on_event: called with a dict per event: status, warning, start, progress, eval, probe,
            checkpoint, saved, done.
        stop: a ``threading.Event`` or a callable returning True to finish the current step,
            save the adapter and return.

    Returns:
        Where the adapter was saved, whether the run finished or was stopped, and metrics.

    Raises:
        ConfigError: every problem with the settings, before anything is loaded.
        OSError: the home folder cannot take writes (named in the message).
    """
    from finetune.probes import answer_probes
    from finetune.saving import (
        adapter_name_for,
        build_manifest,
        latest_checkpoint,
        load_checkpoint,
        save_adapter,
        save_checkpoint,
    )

    hw = check_config(cfg)
    t0 = time.time()
    t, dc = cfg.train, cfg.data
    rank, world, device = dist_setup(hw.device(t.device).name)
    emit = functools.partial(_emit, on_event, rank)
    run_dir = run_dir_for(cfg, rank)
    threads = cpu_threads(t.cpu_threads, device)
    torch.manual_seed(t.seed)

    # --- setup: model, data, adapter, optimizer -------------------------------------------
    resolved, tokenizer, prepared = load_data(cfg, emit)
    train_rows, val_rows = list(prepared.train), list(prepared.val)
    _warn_if_too_big(cfg, resolved, prepared, emit)
    emit("status", message=f"loading {resolved.name} on {device} ({t.precision}, quantization {t.quantization})")
    model, targets, packing = load_lora_model(cfg, resolved, device)
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    plan = plan_steps([len(r["input_ids"]) for r in train_rows], t.batch_size, t.grad_accum, t.epochs,
                      t.max_steps, t.seed, group_by_length=not packing, world_size=world, rank=rank)
    total = len(plan)
    scheduler = build_scheduler(optimizer, t.lr_schedule, t.warmup_ratio, total)
    scaler = make_scaler(device, t.precision)
    start_step = 0
    if cfg.run.resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        start_step = load_checkpoint(ckpt, model, optimizer, scheduler, scaler)
        emit("status", message=f"resumed from {ckpt.name} (step {start_step})")
    train_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(model, device_ids=[int(device.split(":")[1])] if device.startswith("cuda") else None)
    batch = functools.partial(to_batch, train_rows, pad_id=tokenizer.pad_token_id, packing=packing, device=device)
    val_batches = [to_batch(val_rows, range(i, min(i + t.batch_size, len(val_rows))), tokenizer.pad_token_id, packing, device)[0]
                   for i in range(0, len(val_rows), t.batch_size)]
    autocast = _autocast(device, t.precision)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    emit("start", total_steps=total, start_step=start_step, train_rows=len(train_rows),
         val_rows=len(val_rows), device=device, threads=threads, malloc=allocator.in_use(),
         packing=packing, targets=targets,
         trainable_params=trainable, run_dir=str(run_dir), data_stats=prepared.stats)

    metrics: dict = {}
    if val_batches and start_step == 0:
        base_loss = validation_loss(model, val_batches, autocast)  # before any step: no OOM guard needed
        metrics.update(base_val_loss=base_loss, base_val_perplexity=math.exp(base_loss))
        emit("eval", step=0, val_loss=base_loss, val_perplexity=math.exp(base_loss))

    # --- loop -----------------------------------------------------------------------------
    model.train()
    split = 1  # >1 after a CUDA out-of-memory: micro-batches are split, accumulation grows
    oom_events = []
    loop_t0, tokens_seen, loss_acc, loss_tokens = time.time(), 0, torch.zeros((), device=device), 0
    step, status = start_step, "done"
    while step < total:
        if _should_stop(stop, world, device):
            status = "stopped"
            break
        micro = [m[j::split] for m in plan.steps[step] for j in range(split) if m[j::split]]
        batches = [batch(m) for m in micro]
        try:
            s, n_real = forward_backward(train_model, batches, autocast, scaler, sync=world == 1)
            failed = False
        except RuntimeError as err:  # torch.OutOfMemoryError, or cuBLAS failing to allocate
            if not is_oom(err):
                raise
            failed = True
        if world > 1:  # every rank retries the step together, or none does (finetune/oom.py)
            failed = oom.any_rank(failed, device)
            if not failed:
                oom.average_gradients(model, world)
        if failed:
            # Outside the except block, so the failed step's activations are already freed.
            # A retried step must not count twice: totals are added only after success.
            split = _after_oom(optimizer, split, step, t.batch_size, oom_events, emit, device)
            continue
        loss_acc += s
        loss_tokens += sum(nl for _, nl, _ in batches)
        tokens_seen += n_real
        grad_norm = oom.optimizer_step_with_retry(
            lambda: _optimizer_step(model, optimizer, scheduler, scaler, t.max_grad_norm), device)
        step += 1
        if step % t.log_every == 0 or step == total:
            elapsed = time.time() - loop_t0
            log = dict(step=step, total_steps=total, epoch=step / plan.steps_per_epoch,
                       loss=float(loss_acc) / max(loss_tokens, 1), lr=scheduler.get_last_lr()[0],
                       grad_norm=float(grad_norm), tokens_per_second=tokens_seen * world / max(elapsed, 1e-9),
                       elapsed=time.time() - t0, eta=elapsed / (step - start_step) * (total - step),
                       peak_memory_gib=_peak_memory_gib(device))
            emit("progress", **log)
            metrics["train_loss"] = log["loss"]
            loss_acc.zero_()
            loss_tokens = 0
        if val_batches and t.eval_every and step % t.eval_every == 0 and step < total:
            vl = oom.skip_on_oom(lambda: validation_loss(model, val_batches, autocast), "validation", device, emit)
            if vl is not None:
                emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
        if rank == 0 and t.probe_every and step % t.probe_every == 0 and step < total:
            answers = oom.skip_on_oom(lambda: answer_probes(model, tokenizer, dc.system_prompt), "probes", device, emit)
            if answers is not None:
                emit("probe", step=step, answers=answers)
        if rank == 0 and t.save_every and step % t.save_every == 0 and step < total:
            save_checkpoint(run_dir, step, model, optimizer, scheduler, scaler=scaler)
            emit("checkpoint", step=step)

    # --- finish: final eval, probes, save ---------------------------------------------------
    train_seconds = time.time() - loop_t0
    if val_batches:
        vl = oom.skip_on_oom(lambda: validation_loss(model, val_batches, autocast), "validation", device, emit)
        if vl is not None:
            metrics.update(val_loss=vl, val_perplexity=math.exp(vl))
            emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    adapter_dir = None
    if rank == 0:
        probes = oom.skip_on_oom(lambda: answer_probes(model, tokenizer, dc.system_prompt), "probes", device, emit) or []
        emit("probe", step=step, answers=probes)
        name = adapter_name_for(cfg.run.adapter_name, dc.path)
        manifest = build_manifest(
            cfg, resolved, tokenizer, prepared, status=status, steps=step, total_steps=total, targets=targets,
            training={"device": device, "packing": packing, "world_size": world, "oom_retries": oom_events,
                      "effective_micro_batch": max(1, t.batch_size // split)},
            metrics=metrics, probes=probes, run_dir=run_dir,
            timings={"train_seconds": train_seconds, "total_seconds": time.time() - t0,
                     "tokens_per_second": tokens_seen * world / max(train_seconds, 1e-9)})
        adapter_dir = save_adapter(model, tokenizer, name, manifest)
        emit("saved", adapter=adapter_dir.name, path=str(adapter_dir), status=status)
    emit("done", status=status, step=step, metrics=metrics, adapter=adapter_dir.name if adapter_dir else None)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # the other ranks wait while rank 0 writes the adapter
        dist.destroy_process_group()
    return TrainResult(adapter_dir=adapter_dir, status=status, steps=step, metrics=metrics)
