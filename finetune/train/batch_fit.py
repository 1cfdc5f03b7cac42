"""Batch size ``auto``: on a CUDA GPU, the micro-batch is found by trial steps when the run sets up.

A GPU trains faster per token as the batch grows, until the chip is busy or its memory full
(docs/benchmarks.md, "GPU"); a CPU's speed barely moves with it. So ``auto``:

- on the CPU, and under FSDP (the layers are sharded before a step can be tried alone), trains
  at ``DEFAULT_BATCH``, the batch the CPU defaults were measured at (docs/benchmarks.md,
  "Quality"); except that under a time budget on the CPU, where this machine measured the
  same settings before (``finetune.train.speed_record.auto_batch``), it takes the largest batch
  down to ``SMALLEST_AUTO_BATCH`` whose steps the budget buys enough of;
- on a CUDA GPU, tries one forward and backward pass (twice: the second is timed) at
  ``DEFAULT_BATCH`` and then at doubling batches of the *longest* training rows (the most memory
  any step of the run needs), and keeps the largest batch that

  1. fits: its peak, with the optimizer's moments, stays within ``MEMORY_SHARE`` of the memory
     free to the process (headroom for fragmentation, validation, the compiled graphs),
  2. is worth it: at least ``GAIN`` times the tokens per second of half of it (a bigger batch
     that is not faster only takes optimizer steps away), and
  3. leaves the schedule ``MIN_STEPS`` optimizer steps: under a time budget from the measured
     speed, otherwise from the epochs over the rows (never below ``DEFAULT_BATCH`` for it).

  Powers of two only: the search stops at the first batch that fails a test. Trial steps
  change no weight (no optimizer step) and put the random generators back, so the run that
  follows trains exactly as one given that batch; the search's seconds come out of a time
  budget like the rest of setup. Under DDP each process tries its own GPU and all take the
  smallest batch found. A resumed run takes the batch its checkpoint was trained with.

Gradient accumulation stays as set: it multiplies the rows per optimizer step, not the speed.
``search`` is the decision alone, over any trial function, so it is tested without a GPU;
``Trials`` runs the passes (on the CPU too, where it only times them).
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import asdict, dataclass, replace

import torch

from core.gpu import cuda_index, is_oom
from finetune.config import AUTO_BATCH, DEFAULT_BATCH
from finetune.train import compiled
from finetune.train.setup import to_batch
from finetune.train.steps import forward_backward, make_autocast

MEMORY_SHARE = 0.85  # of the memory free to the process (free + cached) a trial's peak may use
GAIN = 1.05  # a doubled batch must train this much faster per token to be taken
# Optimizer steps the schedule keeps at least: about what the CPU's 10-minute default takes on
# Bitext, which passed the release checks' right-intent floor (docs/benchmarks.md, "Quality").
MIN_STEPS = 150
MAX_BATCH = 4096  # config validation's upper bound
# Of a time budget's seconds left after setup, the share that trains (the rest pays for the
# validation passes, probe answers, the save and the margin: finetune/train/budget.py's shares).
TRAINING_SHARE = 0.75
SEARCH_SHARE = 0.05  # trial steps stop before they would take more of a time budget than this


@dataclass
class Trial:
    """One batch size tried: whether it fits and how fast its forward and backward ran."""

    batch: int
    fits: bool
    seconds: float = 0.0  # the second of two passes (the first pays for allocations)
    tokens: int = 0  # real tokens in the batch
    peak_gib: float = 0.0  # the process's peak, the optimizer's moments added
    why: str = ""  # why it does not fit

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Choice:
    """The batch ``auto`` resolved to, and why (``line``: one sentence for the status line)."""

    batch: int
    line: str
    trials: list[Trial]

    def record(self) -> dict:
        """What the adapter's manifest keeps of it."""
        return {
            "batch_auto": {
                "batch": self.batch,
                "why": self.line,
                "trials": [asdict(t) for t in self.trials],
            }
        }


def search(try_batch, limit: int, steps_for=None, affordable=None) -> tuple[int, list[Trial], str]:
    """The batch to train at, by trials from ``DEFAULT_BATCH`` (the module's rules 1-3).

    Args:
        try_batch: ``try_batch(b) -> Trial``.
        limit: the largest batch worth trying (the rows one process sees).
        steps_for: ``steps_for(b, trial) -> int | None``: the optimizer steps the schedule
            would get at batch ``b`` (None: the steps are fixed).
        affordable: ``affordable(seconds) -> bool``: whether trials may spend that much more.

    Returns:
        (batch, trials, why the search stopped where it did).
    """
    b = min(DEFAULT_BATCH, max(limit, 1))
    trials = [try_batch(b)]
    while not trials[-1].fits and b > 1:  # smaller than the default: halve until one fits
        b //= 2
        trials.append(try_batch(b))
    if not trials[-1].fits:
        return 1, trials, f"not even 1 row fits ({trials[-1].why})"
    if len(trials) > 1:
        return b, trials, f"{b * 2} rows did not fit ({trials[-2].why})"
    while True:
        last, nxt = trials[-1], b * 2
        if nxt > limit:
            return b, trials, f"{nxt} rows would be more than the {limit} there are"
        if affordable is not None and not affordable(4 * last.seconds + 0.5):
            return b, trials, "more trials would take too much of the time budget"
        trial = try_batch(nxt)
        trials.append(trial)
        if not trial.fits:
            return b, trials, f"{nxt} rows did not fit ({trial.why})"
        gain = trial.tokens_per_s / max(last.tokens_per_s, 1e-9)
        if gain < GAIN:
            return (
                b,
                trials,
                (
                    f"{nxt} rows trained {gain - 1:+.0%} tokens/s over {b}, under the "
                    f"{GAIN - 1:.0%} worth fewer steps"
                ),
            )
        steps = steps_for(nxt, trial) if steps_for is not None else None
        if steps is not None and steps < MIN_STEPS:
            return b, trials, f"{nxt} rows would leave {steps} steps, under {MIN_STEPS}"
        b = nxt


def describe(batch: int, trials: list[Trial], stop: str) -> str:
    """One sentence: the batch, the trials' speeds, why no larger."""
    tried = ", ".join(
        f"{t.batch}: {t.tokens_per_s / 1000:,.0f}k tokens/s, {t.peak_gib:.1f} GiB"
        if t.fits
        else f"{t.batch}: {t.why}"
        for t in trials
    )
    return f"batch size auto: {batch} rows per micro-batch ({stop}; tried {tried})"


class Trials:
    """``try_batch``: a forward and backward pass of ``model`` on the ``b`` longest training
    rows (cycled when there are fewer), timed. On a CUDA GPU the peak memory decides whether it
    fits; on the CPU (which has no out-of-memory error to catch) every batch fits, and the trials
    only time steps."""

    def __init__(
        self, model, rows, pad_id: int, packing: bool, device: str, autocast, extra_bytes: int
    ):
        self.model, self.rows, self.pad_id, self.packing = model, rows, pad_id, packing
        self.device, self.autocast, self.extra_bytes = device, autocast, extra_bytes
        self.cuda = device.startswith("cuda")
        lengths = [len(r["input_ids"]) for r in rows]
        self.longest = sorted(range(len(rows)), key=lambda i: -lengths[i])
        self.available = self._free_bytes() if self.cuda else None  # bytes this process may use
        self.spent = 0.0  # seconds in trials

    def _free_bytes(self) -> int:
        gc.collect()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(cuda_index(self.device))
        return free + torch.cuda.memory_reserved(self.device)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def __call__(self, b: int) -> Trial:
        began = time.perf_counter()
        idx = [self.longest[i % len(self.longest)] for i in range(b)]
        trial, failed = Trial(b, True), None
        try:
            batch = to_batch(self.rows, idx, self.pad_id, self.packing, self.device)
            trial.tokens = batch[2]
            self._reset_peak()
            for _ in range(2):  # the first pays for allocations and kernel choice
                t0 = time.perf_counter()
                forward_backward(self.model, [batch], self.autocast)
                self._sync()
                trial.seconds = time.perf_counter() - t0
            del batch
            self._check_memory(trial)
        except RuntimeError as err:  # torch.OutOfMemoryError, or cuBLAS failing to allocate
            if not is_oom(err):
                raise
            failed = "out of memory"
        if failed:  # outside the except block, so the failed pass's activations are freed
            trial.fits, trial.why = False, failed
        self.model.zero_grad(set_to_none=True)
        if self.cuda:
            gc.collect()
            torch.cuda.empty_cache()
        self.spent += time.perf_counter() - began
        return trial

    def _reset_peak(self) -> None:
        if self.cuda:
            self._sync()
            torch.cuda.reset_peak_memory_stats(self.device)

    def _check_memory(self, trial: Trial) -> None:
        if not self.cuda:
            return
        peak = torch.cuda.max_memory_allocated(self.device) + self.extra_bytes
        trial.peak_gib = peak / 2**30
        if peak > MEMORY_SHARE * self.available:
            trial.fits = False
            trial.why = (
                f"peak {trial.peak_gib:.1f} GiB over {MEMORY_SHARE:.0%} of "
                f"{self.available / 2**30:.1f}"
            )


@contextlib.contextmanager
def trial_conditions(model, device: str):
    """Trial steps as the run's own, leaving no trace: training mode, the decoder layers eager
    (no compiling per batch tried), and the random generators (dropout) put back after, with
    the peak-memory counter reset so the run reports its own peak."""
    cuda = device.startswith("cuda")
    states = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None)
    was_training = model.training
    model.train()
    try:
        with compiled.eager():
            yield
    finally:
        torch.set_rng_state(states[0])
        model.train(was_training)
        if cuda:
            torch.cuda.set_rng_state_all(states[1])
            torch.cuda.reset_peak_memory_stats(device)


def not_measured(device: str, sharded: bool) -> Choice:
    """``auto`` where no trial runs: the CPU's default, and the reason."""
    where = (
        "under FSDP (its layers are sharded before a step can be tried)"
        if sharded
        else "on the CPU"
    )
    return Choice(
        DEFAULT_BATCH, f"batch size auto: {DEFAULT_BATCH} rows per micro-batch {where}", []
    )


def resolve(
    run_cfg,
    model,
    rows,
    pad_id,
    packing,
    device,
    started: float | None = None,
    *,
    world=1,
    sharded=False,
    saved=None,
) -> Choice | None:
    """The batch ``run_cfg.train.batch_size`` stands for; None when it is a number already.

    Args:
        model: the LoRA model, unwrapped (not yet under DDP; its layers run eagerly here); the
            AdamW moments of its trainable parameters are counted in each trial's peak.
        rows: the tokenized training rows.
        started: when the run began (``time.time()``): a time budget counts from it.
        saved: the batch a resumed run's checkpoint was trained with, if any.
    """
    t = run_cfg.train
    if t.batch_size != AUTO_BATCH:
        return None
    budget = t.time_budget_s > 0 and started is not None
    seconds_left = t.time_budget_s - (time.time() - started) if budget else None
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad) if model else 0
    if saved:
        return Choice(
            int(saved), f"batch size auto: {saved} rows per micro-batch, as the run began", []
        )
    if not device.startswith("cuda") or sharded:
        if budget and not sharded:  # on the CPU: this machine's last speeds for the budget
            from finetune.train.speed_record import auto_batch

            if (fitted := auto_batch(run_cfg)) is not None:
                return Choice(fitted[0], fitted[1], [])
        return not_measured(device, sharded)
    autocast = make_autocast(device, t.precision)
    trials = Trials(model, rows, pad_id, packing, device, autocast, trainable * 8)
    mean_tokens = sum(len(r["input_ids"]) for r in rows) / max(len(rows), 1)

    def steps_for(b: int, trial: Trial) -> int | None:
        if seconds_left is not None:
            step_s = t.grad_accum * b * mean_tokens / max(trial.tokens_per_s, 1e-9)
            return int((seconds_left - trials.spent) * TRAINING_SHARE / step_s)
        if t.max_steps > 0:
            return None
        return int(len(rows) * t.epochs / (b * world * t.grad_accum))

    def affordable(seconds: float) -> bool:
        return seconds_left is None or trials.spent + seconds <= SEARCH_SHARE * seconds_left

    with trial_conditions(model, device):
        limit = min(MAX_BATCH, max(len(rows) // world, 1))
        batch, tried, stop = search(trials, limit, steps_for, affordable)
    if world > 1:
        mine, batch = batch, agree_smallest(batch, device)
        if batch != mine:
            stop += f"; another process found only {batch}"
    return Choice(batch, describe(batch, tried, stop), tried)


def agree_smallest(batch: int, device: str) -> int:
    """The smallest ``batch`` of every DDP process (each measured its own GPU)."""
    import torch.distributed as dist

    value = torch.tensor([batch], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


def saved_batch(run_cfg, run_dir, rank: int = 0, world: int = 1) -> int | None:
    """The batch a run being resumed was trained with (its latest checkpoint's progress)."""
    if not run_cfg.run.resume:
        return None
    from finetune.train.saving import checkpoint_progress, latest_checkpoint

    found = None
    if rank == 0 and (ckpt := latest_checkpoint(run_dir)) is not None:
        found = checkpoint_progress(ckpt).get("batch_size")
    if world > 1:
        from finetune.train import parallel

        found = parallel.broadcast_object(found, rank)
    return found


def with_batch(run_cfg, batch: int):
    """A copy of ``run_cfg`` training at ``batch`` rows per micro-batch."""
    return replace(run_cfg, train=replace(run_cfg.train, batch_size=batch))


def as_asked(run_cfg, choice: Choice | None):
    """``run_cfg`` with the batch size as the user set it (``auto`` where it was resolved): the
    key a speed record is kept under, so the next check of the same settings finds it."""
    return with_batch(run_cfg, AUTO_BATCH) if choice is not None else run_cfg
