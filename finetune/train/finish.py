"""The end of a training run: the final validation pass and probe answers, then rank 0 saves the
adapter on the shelf with its manifest and reports ``done``."""

from __future__ import annotations

import math
import time

from finetune.train import batch_fit, budget_run, compiled, extras, parallel
from finetune.train.run_state import NOTHING_SAVED, UNTRAINED_NOTE, Progress, Run, TrainResult


def finish(run: Run, progress: Progress) -> TrainResult:
    """Final validation and probes, then rank 0 saves the adapter with its manifest.

    A run stopped before its first optimizer step (and not resumed) saves nothing: its adapter
    would equal the base model. It reports ``done`` with no adapter and says so.
    """
    if progress.status == "stopped" and progress.step == 0 and run.start_step == 0:
        return _nothing_to_save(run)
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
            extras.validation(run)
            if val_batches and budget_run.final_validation_fits(run.pacer, emit)
            else None
        )
    if vl is not None:
        metrics.update(val_loss=vl, val_perplexity=math.exp(vl))
        emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    with budget_run.timed(run.pacer, "probes"):
        adapter_dir, probes = None, extras.final_probes(run)
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
                **(run.batch_choice.record() if run.batch_choice is not None else {}),
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
        budget_run.record_speeds(
            run.pacer, batch_fit.as_asked(cfg, run.batch_choice), cfg.train.batch_size, device
        )
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


def _nothing_to_save(run: Run) -> TrainResult:
    run.emit(
        "done", status="stopped", step=0, total_steps=run.total, adapter=None, note=NOTHING_SAVED
    )
    if run.world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return TrainResult(adapter_dir=None, status="stopped", steps=0, note=NOTHING_SAVED)
