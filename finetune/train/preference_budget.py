"""A time budget for a preference run: TRL's trainer paced by the ``Pacer`` supervised runs use.

The budget counts from the run's start (``train_preference(started=)``; the CLI passes its
process's start, so the Train tab's budget runs from the click): loading, tokenizing the pairs
and DPO's reference pass come out of it. After each optimizer step the ``Pacer``
(``finetune.train.budget``) times the steps and sizes the plan: the most steps that end, saved,
within the budget. The learning-rate schedule is resized with each plan, so its decay ends when
the run does.

Unlike supervised training, the method's epochs (its measured recipe, DPO and CPO 1.5) cap the
plan: past them a preference loss keeps widening the margins by lowering both answers
(docs/benchmarks.md), so a fast GPU ends early rather than taking more passes over the pairs.
If the budget runs out while DPO's reference is still being scored, the pass stops, the run
trains only in what is left (TRL scoring the reference at each step) and saves: a warning says so.
"""

from __future__ import annotations

from finetune.train.budget import Cadence, Costs, Pacer
from finetune.train.budget_run import device_sync
from finetune.train.steps import Schedule, resize_schedule

# HF's scheduler names that :class:`finetune.train.steps.Schedule` computes alike
SCHEDULE_KINDS = {
    "linear": "linear",
    "cosine": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}
REFERENCE_SHARE = 0.10  # of the budget: DPO's reference pass stops when less than this is left


class PreferenceBudget:
    """One preference run's time budget: the pacer, the TRL callback it steers
    and what it bought."""

    def __init__(self, seconds: float, t0: float, *, device: str, trainable: int, grad_accum: int):
        """
        Args:
            seconds: the budget; t0: when the run began (the budget counts from it).
            device: where the steps run (``cuda:N`` syncs before each timing).
            trainable: trainable parameters (the size of the adapter saved at the end).
            grad_accum: micro-batches per optimizer step.
        """
        sync = device_sync(device)
        # No validation, probes or checkpoints during a preference run: only the save is reserved.
        costs = Costs(
            n_val_batches=0, grad_accum=grad_accum, adapter_bytes=4 * trainable, probe_cap=0.0
        )
        cadence = {kind: Cadence(0) for kind in ("validation", "probes", "checkpoint")}
        self.seconds = seconds
        self.pacer = Pacer(seconds, t0, cadence=cadence, costs=costs, sync=sync)
        self.planned = 0  # the planned optimizer steps (0: training has not begun)
        self.cap = 0  # the steps the method's epochs take: the plan never exceeds them
        self.reference_cut = False  # the budget ran out while DPO's reference was being scored

    def reference_stop(self, stop=None):
        """``stop`` for DPO's reference pass: the user's stop, or too little of the budget left
        for training after it."""

        def should_stop() -> bool:
            if stop is not None and stop():
                return True
            self.reference_cut = self.pacer.left() < REFERENCE_SHARE * self.seconds
            return self.reference_cut

        return should_stop

    def callback(self):
        """A TRL / transformers callback: resizes the plan and the schedule after each step and
        ends training when the plan is done."""
        from transformers import TrainerCallback

        outer = self

        class Paced(TrainerCallback):
            def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
                outer.begin(args, state, lr_scheduler)

            def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
                # Set either way: transformers' own flow callback, called first, stops a run whose
                # step reached the last plan's end, also when this step's plan has grown. Callbacks
                # after this one (the user's stop) may still set it.
                control.should_training_stop = outer.after_step(state, lr_scheduler)

        return Paced()

    def begin(self, args, state, scheduler) -> None:
        """Training starts: the schedule becomes resizable (the same factors as HF's)."""
        kind = SCHEDULE_KINDS.get(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
        if kind is None:
            raise ValueError(f"a time budget cannot resize the {args.lr_scheduler_type} schedule")
        self.cap = self.planned = state.max_steps
        warmup = args.get_warmup_steps(state.max_steps) / max(1, state.max_steps)
        scheduler.lr_lambdas = [
            Schedule(kind, warmup, state.max_steps) for _ in scheduler.lr_lambdas
        ]
        self.pacer.start()

    def after_step(self, state, scheduler) -> bool:
        """After an optimizer step: re-plan (``state.max_steps`` shows the plan); True: stop now."""
        planned = min(self.pacer.after_step(state.global_step, self.planned), self.cap)
        if planned != self.planned and planned > state.global_step:
            resize_schedule(scheduler, planned)
        self.planned = state.max_steps = max(planned, state.global_step)
        return planned <= state.global_step

    def bought(self, state, pairs: int, batch_size: int, grad_accum: int, tokens: int) -> dict:
        """The manifest's ``budget``: what the seconds bought, in the keys supervised runs use (a
        row is a pair here; each epoch's last micro-batch holds what is left of the pairs)."""
        per_epoch = -(-pairs // batch_size)  # micro-batches an epoch
        epochs, rest = divmod(state.global_step * grad_accum, per_epoch)
        return {
            "seconds": self.seconds,
            "seconds_used": round(self.pacer.spent(), 1),
            "steps": state.global_step,
            "rows_seen": epochs * pairs + min(rest * batch_size, pairs),
            "tokens_seen": tokens,
            "epochs": round(float(state.epoch or 0), 3),
            "reference_cut": self.reference_cut,
        }
