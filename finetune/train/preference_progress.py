"""A preference run's progress: TRL's step and log callbacks turned into the events supervised
training writes (``start``, ``progress``; ``finetune.train.preference`` adds ``status``,
``saved`` and ``done``), so the Train tab and ``--events`` read both, and the stop request."""

from __future__ import annotations

import time


def emitter(on_event):
    """``emit(kind, **data)``: an event of that kind, timed, to ``on_event`` (when given)."""

    def emit(kind: str, **data) -> None:
        if on_event is not None:
            on_event({"type": kind, "time": time.time(), **data})

    return emit


class PreferenceProgress:
    """TRL's step and log callbacks turned into TuneDesk's events, and the stop request."""

    def __init__(self, emit, on_log, stop, device: str = "cpu", **run):
        self.emit, self.on_log, self.stop, self.device = emit, on_log, stop, device
        self.run = run  # what the start event says of the run besides its steps (pairs, method ...)
        self.started, self.stopped = None, False
        self.tokens = 0  # tokens trained on so far (TRL's count, as last logged)

    def callback(self):
        from transformers import TrainerCallback

        outer = self

        class Forward(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                outer.started = time.time()
                outer.emit(
                    "start",
                    total_steps=state.max_steps,
                    start_step=0,
                    val_rows=0,
                    device=outer.device,
                    run_dir=args.output_dir,
                    **outer.run,
                )

            def on_step_end(self, args, state, control, **kwargs):
                if outer.stop is not None and outer.stop():
                    outer.stopped = control.should_training_stop = True

            def on_log(self, args, state, control, logs=None, **kwargs):
                logs = dict(logs or {})
                if outer.on_log is not None:
                    outer.on_log(state.global_step, state.max_steps, logs)
                if "loss" in logs:
                    outer.progress(state, logs)

        return Forward()

    def progress(self, state, logs: dict) -> None:
        from finetune.train.steps import peak_memory_gib

        elapsed = time.time() - (self.started or time.time())
        self.tokens = int(logs.get("num_tokens", self.tokens))
        step, total = state.global_step, max(state.max_steps, 1)
        self.emit(
            "progress",
            step=step,
            total_steps=total,
            epoch=float(state.epoch or 0),
            loss=float(logs["loss"]),
            lr=float(logs.get("learning_rate", 0.0)),
            grad_norm=float(logs.get("grad_norm", 0.0)),
            tokens_per_second=float(logs.get("num_tokens", 0.0)) / max(elapsed, 1e-9),
            elapsed=elapsed,
            eta=elapsed / max(step, 1) * (total - step),
            peak_memory_gib=peak_memory_gib(self.device),
            reward_accuracy=float(logs.get("rewards/accuracies", 0.0)),
            reward_margin=float(logs.get("rewards/margins", 0.0)),
        )
