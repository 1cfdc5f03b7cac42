"""A time budget checked before the run: what the dry run measures for it.

``finetune.train.dryrun.dry_run`` loads the model as a run does; under a time budget it then
asks this module for the rest of what the budget pays for: the start-up it just went through
(less a one-off conversion of the base model), one step on rows of typical length, one
validation batch. ``finetune.train.budget_plan`` turns them into the steps the budget buys and
a verdict; ``finetune.train.speed_record`` keeps them for Check and Start.
"""

from __future__ import annotations

import time
from dataclasses import asdict


def first_resolve_seconds(cfg) -> float:
    """Seconds spent converting or downloading the base model now (0 when it was cached): a run
    of these settings later will not pay them."""
    from core.models import resolve

    t = time.time()
    resolved = resolve(cfg.model.name)
    return time.time() - t if resolved.source in ("gguf", "hub") else 0.0


def timed_step(model, optimizer, batch, autocast, device: str) -> tuple[float, float, object, int]:
    """One micro-batch forward and backward, then the optimizer: (micro_s, opt_s,
    loss, real tokens)."""
    import torch

    from finetune.train.steps import forward_backward

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t0 = time.perf_counter()
    loss, n_real = forward_backward(model, [batch], autocast)
    sync()
    t1 = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sync()
    return t1 - t0, time.perf_counter() - t1, loss, n_real


def budget_report(
    cfg,
    model,
    optimizer,
    prepared,
    tokenizer,
    packing: bool,
    device: str,
    startup: float,
    record_as=None,
    layers=None,
) -> dict:
    """What the time budget buys: one step on rows of median length (the plan groups rows by
    length, so a typical batch is of one length), one validation batch, then the estimate.

    ``record_as``: the settings the speeds are kept under (default ``cfg``; the asked ones where
    the batch size ``auto`` was resolved into ``cfg``). ``layers``: the run's compiled decoder
    layers (``finetune.train.compiled.Compiled``), or None: the typical step is then timed at
    its second pass (its first, at a new length, compiles again) and validation runs eager, as
    the run's does."""
    from finetune.train.budget_plan import Measured, estimate, verdict
    from finetune.train.compiled import eager_if
    from finetune.train.setup import to_batch
    from finetune.train.speed_record import save
    from finetune.train.steps import make_autocast, validation_loss

    t, autocast = cfg.train, make_autocast(device, cfg.train.precision)
    rows, val = list(prepared.train), list(prepared.val)
    by_length = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))
    middle = max(0, len(rows) // 2 - t.batch_size // 2)
    typical = to_batch(
        rows, by_length[middle : middle + t.batch_size], tokenizer.pad_token_id, packing, device
    )
    failed = layers is not None and layers.failed
    with eager_if(layers if failed else None):  # compiling failed: the run trains eagerly
        for _ in range(2 if layers is not None and not failed else 1):
            micro_s, opt_s, _, _ = timed_step(model, optimizer, typical, autocast, device)
    val_batch_s, n_val = 0.0, -(-len(val) // t.batch_size)
    if val:
        first = to_batch(
            val, range(min(t.batch_size, len(val))), tokenizer.pad_token_id, packing, device
        )[0]
        began = time.perf_counter()
        with eager_if(layers):
            validation_loss(model, [first], autocast)
        val_batch_s = time.perf_counter() - began
    measured = Measured(startup, micro_s * t.grad_accum + opt_s, val_batch_s, n_val)
    est = estimate(t.time_budget_s, measured)
    level, sentence = verdict(est, measured)
    save(record_as or cfg, measured, "dry run", t.batch_size, device)
    return {
        **asdict(measured),
        "steps": est.steps,
        "validation_s": est.validation_s,
        "val_batches_kept": est.val_batches,
        "extras_s": est.extras_s,
        "verdict": level,
        "sentence": sentence,
    }
