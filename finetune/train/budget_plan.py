"""What a time budget buys, in words: the steps left after start-up and validation, before the run
and at its end.

A budget pays for start-up first (imports, the base model, tokenizing the rows: the budget counts
from the process's start), then for the base model's validation pass, the extras the ``Pacer``
runs (mid-run validation, probe answers, checkpoints) and the final validation, probes and save;
the steps get what is left. On a busy small machine a short budget can go to start-up and an
unbounded validation pass before a single step is taken.

So a validation pass is sized to the budget: at most ``VALIDATION_PASS_SHARE`` of it, the base
pass timed batch by batch and cut there (``validation_batches``), every later pass on the same
rows. And a run that buys fewer than ``MIN_USEFUL_STEPS`` steps says so: before it starts, from a
dry run's measurements (``estimate`` and ``verdict``), and in its result (``short_run_note``).

No torch here: the CLI, the Train tab's Check and the tests use it without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from finetune.train.budget import AUTO_PASSES, MARGIN_SHARE, PROBE_SHARE, VALIDATION_SHARE

# Fewer optimizer steps than this barely move a LoRA adapter: 30 steps of 8 are the fewest any
# recipe in docs/benchmarks.md trained (the Train tab's old defaults), and issue 48's goal for a
# 5-minute budget is 30 steps or a refusal with the reason.
MIN_USEFUL_STEPS = 30
VALIDATION_PASS_SHARE = (
    0.03  # one validation pass (the base's, the final one) takes at most this share
)
SAVE_SECONDS = 3.0  # writing and hashing the adapter at the end (measured 1-2 s on 2 cores)


@dataclass
class Measured:
    """Seconds a run of these settings spends on each part, as a dry run (or a
    run) measured them."""

    startup_s: float  # from the process's start to the first step: imports, model, tokenizing
    step_s: float  # one optimizer step on rows of typical length
    val_batch_s: float  # one validation batch (a forward pass, no gradients)
    val_batches: int  # validation batches in the held-out rows


@dataclass
class Estimate:
    """What the budget buys: seconds by part and the steps left for training."""

    budget_s: float
    startup_s: float
    validation_s: float  # the base pass, the mid-run passes and the final one
    val_batches: int  # validation batches a pass keeps (of ``val_batches_all``)
    val_batches_all: int
    extras_s: float  # probe answers, checkpoints, the save and the margin
    step_s: float
    steps: int


def validation_batches(budget_s: float, batch_s: float, available: int) -> int:
    """How many validation batches one pass may take: at most ``VALIDATION_PASS_SHARE`` of the
    budget at ``batch_s`` seconds a batch, at least one (a loss on some rows beats none)."""
    if available <= 0:
        return 0
    return max(1, min(available, int(VALIDATION_PASS_SHARE * budget_s / max(batch_s, 1e-9))))


def estimate(budget_s: float, m: Measured) -> Estimate:
    """The steps ``budget_s`` seconds buy at the measured speeds, extras counted as the ``Pacer``
    runs them (auto cadence: validation passes within ``VALIDATION_SHARE``, probe answers capped at
    ``PROBE_SHARE`` a pass, three checkpoints, the final pass and save, a margin)."""
    kept = validation_batches(budget_s, m.val_batch_s, m.val_batches)
    val_pass = kept * m.val_batch_s
    mid_passes = (
        min(AUTO_PASSES - 1, int(VALIDATION_SHARE * budget_s / val_pass)) if val_pass else 0
    )
    validation = val_pass * (2 + mid_passes)  # the base pass, the mid-run ones, the final one
    probes = AUTO_PASSES * min(PROBE_SHARE * budget_s, max(val_pass, m.step_s))
    extras = probes + SAVE_SECONDS + MARGIN_SHARE * budget_s + m.step_s / 2
    left = budget_s - m.startup_s - validation - extras
    steps = max(0, int(left / max(m.step_s, 1e-9)))
    return Estimate(budget_s, m.startup_s, validation, kept, m.val_batches, extras, m.step_s, steps)


def at_batch(m: Measured, measured_at: int, batch: int) -> Measured:
    """``m``'s speeds, measured at ``measured_at`` rows per micro-batch, for ``batch`` rows: on a
    CPU a step and a validation batch take time in proportion to their rows (the cores are busy
    at any batch), and the same validation rows make ``measured_at / batch`` times the batches."""
    share = batch / measured_at
    val_rows = m.val_batches * measured_at  # at most: the last batch may have been short
    return Measured(m.startup_s, m.step_s * share, m.val_batch_s * share, -(-val_rows // batch))


def fit_batch(
    budget_s: float, speeds_at: Callable[[int], Measured], largest: int, smallest: int
) -> tuple[int, Measured]:
    """The largest batch from ``largest`` down to ``smallest`` whose speeds (``speeds_at(b)``)
    buy ``MIN_USEFUL_STEPS`` steps in ``budget_s``, with those speeds; ``smallest`` when none
    does (the most steps there are: its estimate then says how much longer a useful run needs)."""
    for batch in range(largest, smallest, -1):
        speeds = speeds_at(batch)
        if estimate(budget_s, speeds).steps >= MIN_USEFUL_STEPS:
            return batch, speeds
    return smallest, speeds_at(smallest)


def budget_for(steps: int, m: Measured, most: float = 7 * 24 * 3600) -> float:
    """The shortest budget (whole minutes) that buys ``steps`` steps at ``m``'s speeds."""
    minutes = 1
    while minutes * 60 < most and estimate(minutes * 60, m).steps < steps:
        minutes += 1 if minutes < 60 else 10
    return minutes * 60.0


def breakdown(e: Estimate) -> str:
    """Where the seconds go, in words (for a sentence's middle)."""
    rows = (
        f"{e.val_batches} of {e.val_batches_all} validation batches"
        if e.val_batches < e.val_batches_all
        else f"all {e.val_batches_all} validation batches"
    )
    return (
        f"start-up {e.startup_s:.0f} s, validation {e.validation_s:.0f} s ({rows} a pass), probe "
        f"answers, checkpoints and the save {e.extras_s:.0f} s, then {e.step_s:.1f} s a step"
    )


def verdict(e: Estimate, m: Measured) -> tuple[str, str]:
    """``("ok" | "refuse", sentence)``: whether the budget buys
    ``MIN_USEFUL_STEPS`` steps, and why."""
    head = f"A {e.budget_s / 60:g}-minute budget buys about {e.steps} steps here: {breakdown(e)}."
    if e.steps >= MIN_USEFUL_STEPS:
        return "ok", head
    return "refuse", (
        f"{head} A useful run needs at least {MIN_USEFUL_STEPS} steps: {advice(e, m)}."
    )


def advice(e: Estimate, m: Measured) -> str:
    """What to change so the budget buys ``MIN_USEFUL_STEPS`` steps."""
    tips = [f"give it at least {budget_for(MIN_USEFUL_STEPS, m) / 60:g} minutes"]
    tips.append("lower the batch size or max length (each step and validation batch takes less)")
    return ", or ".join(tips)


def short_run_note(budget_s: float, steps: int, parts: dict) -> str:
    """The result's sentence for a budget run that trained fewer than ``MIN_USEFUL_STEPS`` steps
    ("" when it trained enough). ``parts``: startup_s, validation_s, train_s (measured)."""
    if steps >= MIN_USEFUL_STEPS:
        return ""
    per = parts.get("train_s", 0.0) / steps if steps else 0.0
    speed = f", {per:.1f} s a step" if steps else ""
    return (
        f"the {budget_s / 60:g}-minute budget bought only {steps} "
        f"step{'' if steps == 1 else 's'}, fewer than the {MIN_USEFUL_STEPS} a useful run needs "
        f"(start-up {parts.get('startup_s', 0):.0f} s, validation "
        f"{parts.get('validation_s', 0):.0f} s, training {parts.get('train_s', 0):.0f} "
        f"s{speed}): the adapter has barely changed; give a longer budget, or a smaller batch or "
        "max length"
    )
