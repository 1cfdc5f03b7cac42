"""Running out of GPU memory during training, without losing the run.

* A failed step is retried with its micro-batches split in two (``train._after_oom``). Under
  DDP the ranks first agree (:func:`any_rank`): one rank splitting alone would run a different
  number of micro-batches and all-reduces than the others, and they would hang or mix
  gradients of different steps. So DDP's own per-backward all-reduce is off (``no_sync`` on
  every micro-batch) and :func:`average_gradients` runs once every rank has succeeded.
* Under FSDP none of this applies: every forward all-gathers the layer's weights, so a rank
  that fails mid-step leaves the others inside a collective, and no agreement can happen
  before it. The error is raised (torchrun then stops every rank) with the settings to lower.
* Validation and probe answers that run out of memory are skipped with a warning
  (:func:`skip_on_oom`): they do not change the adapter.
"""

from __future__ import annotations

import torch

from core.gpu import is_oom, release_memory


def any_rank(flag: bool, device: str) -> bool:
    """True on every rank when ``flag`` is True on any (one small all-reduce)."""
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def average_gradients(model, world: int) -> None:
    """All-reduce the trainable parameters' gradients in one flat buffer and average them.

    LoRA gradients are a few MB, so one buffer costs less than DDP's bucketed overlap saves.
    A parameter without a gradient counts as zeros, so every rank reduces the same sizes.
    """
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= world
    for g, reduced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
        g.copy_(reduced)


def after_oom(
    optimizer, split: int, step: int, batch_size: int, oom_events: list, emit, device: str
) -> int:
    """Drop the partial step's gradients and split its micro-batches in two (raises at 64)."""
    optimizer.zero_grad(set_to_none=True)
    release_memory(device)
    if split >= 64:
        raise torch.OutOfMemoryError(
            f"out of memory even with micro-batches of 1 (batch size {batch_size})"
        )
    split *= 2
    micro = max(1, batch_size // split)
    oom_events.append({"step": step, "micro_batch": micro})
    emit("status", message=f"CUDA out of memory: micro-batch now {micro}, accumulation x{split}")
    return split


def fsdp_oom(batch_size: int) -> torch.OutOfMemoryError:
    """The error an out-of-memory step raises under FSDP, where it cannot be split (above)."""
    return torch.OutOfMemoryError(
        f"out of GPU memory in a training step under sharding fsdp (batch size {batch_size}); "
        "FSDP cannot split the step and retry, as every rank takes part in each forward: lower "
        "the batch size or max length, turn on gradient checkpointing, or add processes"
    )


def skip_on_oom(fn, what: str, device: str, emit, recover: bool = True):
    """``fn()``, or None with a "warning" event when it runs out of GPU memory.

    Args:
        recover: False under FSDP, where the error is raised: the other ranks are inside the
            same forward's all-gathers, and a rank that skipped would meet them in the wrong one.
    """
    try:
        return fn()
    except RuntimeError as err:  # torch.OutOfMemoryError is one
        if not is_oom(err) or not recover:
            raise
    release_memory(device)  # outside the except block: the failed call's frames are gone
    emit("warning", message=f"{what} ran out of GPU memory and was skipped; training goes on")
    return None


def optimizer_step_with_retry(step_fn, device: str, retry: bool = True):
    """``step_fn()``; after an out-of-memory error, release cached memory and try once more.

    The optimizer's temporaries are what is new in a step; freeing the allocator's cache
    usually makes room. (A retried fused AdamW step counts one extra step in its bias
    correction: a negligible change next to a lost run.) ``retry=False`` under FSDP: the
    gradient norm is a collective, and one rank retrying alone would run it twice.
    """
    try:
        return step_fn()
    except RuntimeError as err:
        if not is_oom(err) or not retry:
            raise
    release_memory(device)
    try:
        return step_fn()
    except RuntimeError as err:
        if not is_oom(err):
            raise
    raise torch.OutOfMemoryError(
        "out of GPU memory in the optimizer step even after freeing the cache: "
        "lower the batch size or max length, or use 4-bit quantization"
    )
