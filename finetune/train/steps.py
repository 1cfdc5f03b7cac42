"""One training step's mechanics: which examples go in which step, the loss, and the step.

The loss computes logits only where a label is real. The LM head over a 49k vocabulary is
a large share of a small model's FLOPs, and prompt tokens (label -100) would be thrown away,
so the head runs on the selected hidden states only (``logits_to_keep`` as a boolean mask),
and its logits are consumed chunk by chunk and never kept (``finetune.train.fused``).
"""

from __future__ import annotations

import contextlib
import math
import random
import resource
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812

from finetune.train.fused import head_returns_hidden, lean_head, linear_cross_entropy_sum


@dataclass
class StepPlan:
    """The index lists of every optimizer step: steps[i] = micro-batches, each a list of rows."""

    steps: list[list[list[int]]]
    steps_per_epoch: int

    def __len__(self) -> int:
        return len(self.steps)


def plan_steps(
    lengths: list[int],
    batch_size: int,
    grad_accum: int,
    epochs: float,
    max_steps: int,
    seed: int,
    group_by_length: bool = False,
    world_size: int = 1,
    rank: int = 0,
) -> StepPlan:
    """Deterministic schedule of row indices for the whole run (so resume can skip ahead).

    Args:
        lengths: token length of every training row.
        group_by_length: sort rows of similar length into the same micro-batch (cuts padding
            when packing is off); batches are shuffled afterwards so order stays random.
        world_size, rank: for DDP each rank takes every world_size-th micro-batch.
    """
    n = len(lengths)
    if n == 0:
        raise ValueError("no training rows left after filtering; check the dataset and max length")
    per_epoch = math.ceil(n / (batch_size * world_size))
    steps_per_epoch = max(1, math.ceil(per_epoch / grad_accum))
    total = max_steps if max_steps > 0 else max(1, math.ceil(steps_per_epoch * epochs))
    steps: list[list[list[int]]] = []
    epoch = 0
    while len(steps) < total:
        micro = _epoch_batches(lengths, batch_size * world_size, seed + epoch, group_by_length)
        # Every rank must keep the same batches (DDP all-reduces once per micro-batch), so a
        # last batch too small to give each rank a row is dropped on all of them.
        micro = [b[rank::world_size] for b in micro if len(b) >= world_size]
        for i in range(0, len(micro), grad_accum):
            steps.append(micro[i : i + grad_accum])
            if len(steps) == total:
                break
        epoch += 1
    return StepPlan(steps=steps, steps_per_epoch=steps_per_epoch)


def _epoch_batches(
    lengths: list[int], size: int, seed: int, group_by_length: bool
) -> list[list[int]]:
    if group_by_length:
        from finetune.data.collate import length_grouped_batches

        return length_grouped_batches(lengths, size, seed)
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    return [order[i : i + size] for i in range(0, len(order), size)]


def label_mask(labels: torch.Tensor) -> torch.Tensor:
    """Positions whose *next* token is a real label: (B, T) bool."""
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != -100
    return keep


def loss_sum(model, batch: dict, selective: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over real label tokens, and how many there were (both tensors,
    so the hot loop never waits on the device).

    Args:
        batch: input_ids (B, T), labels (B, T), and attention_mask or position_ids.
        selective: compute logits only where labels are real (False = every position, the
            seed recipe's way; kept for the benchmark baseline).
    """
    labels = batch["labels"]
    keep = label_mask(labels)
    n_tokens = keep.sum()
    inputs = {
        k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids")
    }
    if selective:
        targets = labels[:, 1:][keep[:, :-1]]  # (N,)
        head = lean_head(model)
        if head is not None:  # the head's logits are never kept (finetune/train/fused.py)
            with head_returns_hidden(model):
                hidden = model(**inputs, logits_to_keep=keep).logits  # (N, H)
            return linear_cross_entropy_sum(hidden.to(head.dtype), head, targets), n_tokens
        logits = model(**inputs, logits_to_keep=keep).logits  # (N, V)
    else:
        logits = model(**inputs).logits[:, :-1][keep[:, :-1]]  # (B, T, V) -> (N, V)
        targets = labels[:, 1:][keep[:, :-1]]
    return F.cross_entropy(logits.float(), targets, reduction="sum"), n_tokens


def no_grad(model):
    """``torch.inference_mode()``, or ``torch.no_grad()`` for an FSDP model: FSDP2 all-gathers
    into the same unsharded parameters every time, and ones first made in inference mode could
    not be written by the next training step's all-gather."""
    from torch.distributed.fsdp import FSDPModule

    return torch.no_grad() if isinstance(model, FSDPModule) else torch.inference_mode()


def validation_loss(model, batches: list[dict], autocast=None) -> float:
    """Mean NLL per label token over all validation batches (independent of batching)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with no_grad(model):
        for batch in batches:
            with autocast() if autocast else _null():
                s, n = loss_sum(model, batch)
            total += float(s)
            count += int(n)
    model.train(was_training)
    return total / max(count, 1)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def build_optimizer(model, lr: float, weight_decay: float, kind: str, device: str):
    """AdamW over trainable (LoRA) parameters: fused on CUDA, foreach on CPU."""
    params = [p for p in model.parameters() if p.requires_grad]
    if kind == "paged_adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW8bit(params, lr=lr, weight_decay=weight_decay)
    if device.startswith("cuda"):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)


class Schedule:
    """The learning-rate factor at a step: linear warm-up, then cosine or linear decay to 0
    at ``total`` (or constant), as transformers' schedulers compute it.

    A callable object rather than a closure: ``LambdaLR`` saves its attributes in checkpoints,
    and a time-budget run changes ``total`` as it learns its own speed (``resize_schedule``).
    """

    def __init__(self, kind: str, warmup_ratio: float, total: int):
        self.kind, self.warmup_ratio = kind, warmup_ratio
        self.resize(total)

    def resize(self, total: int) -> None:
        self.total = max(1, int(total))
        self.warmup = int(round(self.warmup_ratio * self.total))

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return step / max(1, self.warmup)
        if self.kind == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        if self.kind == "linear":
            return 1.0 - progress
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def build_scheduler(optimizer, schedule: str, warmup_ratio: float, total_steps: int):
    """A ``LambdaLR`` over :class:`Schedule` (cosine, linear or constant after warm-up)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, Schedule(schedule, warmup_ratio, total_steps)
    )


def schedule_total(scheduler) -> int:
    """The step at which ``scheduler``'s decay ends."""
    return scheduler.lr_lambdas[0].total


def resize_schedule(scheduler, total_steps: int) -> None:
    """Make the schedule end at ``total_steps``; the next optimizer step already uses it."""
    for fn in scheduler.lr_lambdas:
        fn.resize(total_steps)
    lrs = [
        base * fn(scheduler.last_epoch)
        for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs  # what get_last_lr() reports, as step() would set it


def make_autocast(device: str, precision: str):
    """A zero-argument autocast context factory for ``precision``, or None for fp32."""
    if precision == "fp32":
        return None
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return lambda: torch.autocast(kind, dtype=dtype)


def forward_backward(
    train_model, batches, autocast=None, scaler=None, sync: bool = True
) -> tuple[torch.Tensor, int]:
    """Accumulate the gradients of one optimizer step over its micro-batches.

    The loss is the mean over the whole step's label tokens (so splitting a step into more
    micro-batches leaves the gradient unchanged); under DDP the gradients are all-reduced
    once, after the last micro-batch, and then averaged over ranks; with ``sync=False`` not at
    all (the caller averages them, see ``finetune.train.oom``). Under FSDP they are
    reduce-scattered after the last micro-batch (``set_requires_gradient_sync``, FSDP2's
    ``no_sync``: the earlier ones accumulate unsharded gradients locally).

    Returns:
        The summed loss (a detached device tensor) and the number of real tokens.
    """
    n_label = max(sum(nl for _, nl, _ in batches), 1)
    total, n_real = 0, 0
    for i, (b, _, real) in enumerate(batches):
        last = i == len(batches) - 1 and sync
        with _gradient_sync(train_model, last):
            with autocast() if autocast else contextlib.nullcontext():
                s, _ = loss_sum(train_model, b)
            loss = s / n_label
            (scaler.scale(loss) if scaler else loss).backward()
        total, n_real = total + s.detach(), n_real + real
    return total, n_real


def _gradient_sync(train_model, on: bool):
    """A context in which backward does (``on``) or does not all-reduce the gradients."""
    if hasattr(train_model, "set_requires_gradient_sync"):  # FSDP2: a flag, not a context
        train_model.set_requires_gradient_sync(on)
        return contextlib.nullcontext()
    return (
        train_model.no_sync()
        if not on and hasattr(train_model, "no_sync")
        else contextlib.nullcontext()
    )


def optimizer_step(model, optimizer, scheduler, scaler, max_grad_norm: float) -> torch.Tensor:
    """Clip, step the optimizer and the schedule, clear the gradients; returns the gradient norm."""
    if scaler:
        scaler.unscale_(optimizer)
    params = model.parameters()
    grad_norm = (
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        if max_grad_norm > 0
        else torch.zeros(())
    )
    if hasattr(grad_norm, "full_tensor"):  # FSDP: the norm over every rank's shards, as a DTensor
        grad_norm = grad_norm.full_tensor()
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


def peak_memory_gib(device: str) -> float:
    """The process's peak memory so far: allocated on CUDA, resident set on the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
