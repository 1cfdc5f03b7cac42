"""What a training run does beside its steps: the base model's validation pass before the first,
validation passes, probe answers and checkpoints between steps, and the last probe answers.

Each runs when its ``budget.Cadence`` says, timed apart from the steps under a time budget
(``budget_run.timed``), the decoder layers eager where the step runs them compiled (``compiled``).
"""

from __future__ import annotations

import math

from finetune.train import budget_run, compiled, oom, parallel
from finetune.train.budget_plan import VALIDATION_PASS_SHARE
from finetune.train.run_state import Run
from finetune.train.steps import validation_loss


def base_validation(run: Run, val_rows: int) -> None:
    """The base model's validation loss; under a time budget on the rows one pass affords."""
    with compiled.eager_if(run.compiled):
        _base_validation_pass(run, val_rows)


def _base_validation_pass(run: Run, val_rows: int) -> None:
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


def between_steps(run: Run, step: int, total: int) -> None:
    """The periodic extras of a step that is not the last: validation, probe answers, checkpoint
    (every N steps, or on "auto" at fixed shares of the planned steps: ``budget.Cadence``)."""
    emit, cadence = run.emit, run.cadence
    hold = run.pacer is not None and not run.pacer.settled  # auto extras wait for a sized plan
    if cadence["validation"].due(step, total, hold) and run.val_batches:
        with budget_run.timed(run.pacer, "validation"):
            vl = validation(run)
        if vl is not None:
            emit("eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    if cadence["probes"].due(step, total, hold):
        with budget_run.timed(run.pacer, "probes"):
            answers = probes(run, max_time=run.pacer.probe_seconds() if run.pacer else None)
        if answers is not None:
            emit("probe", step=step, answers=answers)
    if cadence["checkpoint"].due(step, total, hold):
        with budget_run.timed(run.pacer, "checkpoint"):
            checkpoint(run, step)


def validation(run: Run) -> float | None:
    """Mean validation loss on every rank, or None when it ran out of memory (not under FSDP)."""
    return _eager_unless_oom(
        run, lambda: validation_loss(run.model, run.val_batches, run.autocast), "validation"
    )


def probes(run: Run, max_time: float | None = None) -> list | None:
    """Probe answers on rank 0 (on every rank under FSDP, where generating is collective),
    generating for at most ``max_time`` seconds when given."""
    from finetune.train.probes import answer_probes

    if run.rank != 0 and not run.sharded:
        return None
    return _eager_unless_oom(
        run,
        lambda: answer_probes(
            run.model,
            run.tokenizer,
            run.cfg.data.system_prompt,
            synced=run.sharded,
            max_time=max_time,
        ),
        "probes",
    )


def _eager_unless_oom(run: Run, work, what: str):
    """``work()`` with the decoder layers eager (``generate``'s KV cache grows at every token;
    no-grad passes would compile graphs of their own); None when it ran out of memory (not
    under FSDP, where every rank must go on together)."""

    def eager_work():
        with compiled.eager_if(run.compiled):
            return work()

    return oom.skip_on_oom(eager_work, what, run.device, run.emit, recover=not run.sharded)


def final_probes(run: Run) -> list:
    """The last probe answers; under a time budget only in the time left before the save."""
    if run.pacer is None:
        return probes(run) or []
    seconds = run.pacer.probe_seconds(final=True)
    return (probes(run, max_time=seconds) or []) if seconds else []


def checkpoint(run: Run, step: int) -> None:
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
    progress = {
        "tokens_seen": run.tokens,
        "batch_size": run.cfg.train.batch_size,  # what a resumed "auto" run trains at
        **budget_run.checkpoint_fields(run.pacer),
    }
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
