"""Training for a time budget: the run measures its own speed and sizes its plan to end on time.

The budget counts from the start of the run (``train(started=)``; the CLI passes its process's
start), so imports and loading the model and the data are already spent when the first step
starts. The first optimizer step is timed but not trusted (it pays for first allocations and
kernel choices, seconds on a GPU), nor is a later one that compiled (the length made symbolic,
a smaller last batch); the next ``MEASURE_STEPS`` are, and after each step the plan
is sized: the most steps ``n`` with

    n * seconds_per_step + extras still due in those n steps <= deadline - now - reserve

where the reserve is the final validation, probe answers and save plus a margin, and the
extras the validation passes, probes and checkpoints due before the end. Each extra is timed
when it runs; until then its cost is guessed from the step time (``Costs``). The base model's
validation pass, before the first step, keeps only the batches one pass of the budget affords
(``budget_run.base_validation``, ``budget_plan.VALIDATION_PASS_SHARE``) and prices the later
passes by its second batch (the first also warms the device up). Once sized,
the plan is re-checked every few seconds of training with the slower of two means, over the
later half of the timed steps and over the last quarter: a machine that gets busy shortens the
plan instead of overrunning it, one batch of long rows does not. The caller resizes the
learning-rate schedule with the plan (``finetune.train.steps.resize_schedule``), so warm-up
and decay end when the budget does. The data does not cap the plan: a fast GPU takes more
epochs of the rows.

Validation, probes and checkpoints left on "auto" (``None``) run at fixed shares of the plan
(``Cadence``), once it is sized; under a budget the mid-run validation passes are fewer when
they would take more than ``VALIDATION_SHARE`` of it, and probe answers generate for at most
``PROBE_SHARE`` of it. Under DDP or FSDP rank 0 decides and the others follow, at steps every
rank knows in advance (``agree``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

MEASURE_STEPS = 3  # steps timed after the first before the plan is trusted
CHECK_SECONDS = 5.0  # re-plan at least this often (1 % of the budget when that is shorter)
AUTO_PASSES = 4  # "auto" extras split the plan into this many parts (the last one ends it)
VALIDATION_SHARE = 0.10  # mid-run validation passes take at most this share of a budget
MARGIN_SHARE = 0.01  # of the budget, kept free beyond the measured reserve
PROBE_SHARE = 0.02  # one pass of probe answers generates for at most this share of a budget


class Cadence:
    """When one periodic extra (validation, probes, checkpoint) runs: every ``every`` steps (0:
    never), or on auto (``None``) when a step enters the next of ``passes`` equal parts of the
    plan. Auto remembers the parts done, so a plan that grows does not repeat one; it leaves
    a plan shorter than two steps a part to its end, and waits while a budget run is still
    timing its first steps (``hold``): parts of a plan not yet sized would fall too early."""

    def __init__(self, every: int | None, passes: int = AUTO_PASSES):
        self.every, self.passes = every, passes
        self.parts_done: int | None = None  # auto: set at the first step seen

    def _parts(self, step: int, total: int) -> int:
        return step * self.passes // total

    def due(self, step: int, total: int, hold: bool = False) -> bool:
        """Whether the extra runs after ``step`` of ``total`` (call once per step, in order)."""
        if self.every is not None:
            return bool(self.every) and step % self.every == 0
        if hold or total < 2 * self.passes:
            return False
        if self.parts_done is None:
            self.parts_done = self._parts(step - 1, total)
        part = self._parts(step, total)
        fire, self.parts_done = part > self.parts_done, max(part, self.parts_done)
        return fire

    def count(self, step: int, total: int) -> int:
        """How many of the steps ``step + 1 .. total - 1`` it will run after (the last has none)."""
        if total - 1 <= step:
            return 0
        if self.every is not None:
            return (total - 1) // self.every - step // self.every if self.every else 0
        if total < 2 * self.passes:
            return 0
        done = (
            self._parts(step, total)
            if self.parts_done is None
            else max(self.parts_done, self._parts(step, total))
        )
        return max(0, self._parts(total - 1, total) - done)


@dataclass
class Costs:
    """Seconds of one pass of each extra: the last measured, else a guess from the step time."""

    n_val_batches: int
    grad_accum: int
    adapter_bytes: int
    probe_cap: float  # probe answers stop generating after this many seconds
    seen: dict = field(default_factory=dict)  # "validation" / "probes" / "checkpoint" -> seconds

    def of(self, kind: str, per_step: float) -> float:
        if kind in self.seen:
            return self.seen[kind]
        # A validation batch is one forward pass; a step is grad_accum x (forward + backward ~ 3).
        validation = per_step * self.n_val_batches / (3 * self.grad_accum)
        guess = {
            "validation": validation,
            "probes": min(self.probe_cap, max(validation, per_step)),
            # written and hashed at a conservative 200 MB/s, three copies with AdamW's moments
            "checkpoint": 0.2 + 3 * self.adapter_bytes / 200e6,
        }
        return guess[kind]


class Pacer:
    """Sizes a budget run's plan from measured step times; the loop calls ``after_step``."""

    def __init__(
        self,
        seconds: float,
        t0: float,
        *,
        cadence: dict,
        costs: Costs,
        spent: float = 0.0,
        sync=None,
        agree=None,
    ):
        """
        Args:
            seconds: the whole budget.
            t0: when this session's run began; ``spent``: budget used before it (a resume).
            cadence: the run's extras, {"validation" / "probes" / "checkpoint": Cadence}; under a
                budget auto validation gets fewer passes when they would cost too much.
            sync: waits for the device (CUDA work is asynchronous); agree: rank 0's value on
                every rank (``parallel.broadcast_object``), None for one process.
        """
        self.seconds, self.deadline = seconds, t0 + seconds - spent
        self.cadence, self.costs = cadence, costs
        self.sync, self.agree = sync or (lambda: None), agree
        self.first: float | None = None  # the first step's seconds (not trusted)
        self.windows: list[tuple[int, float]] = []  # (steps, seconds) measured since
        self.mark, self.since, self.check_every = time.time(), 0, 1
        self.untrusted = False  # a step since the mark compiled: that window is not measured
        self.t0, self.steps_began = (
            t0,
            None,
        )  # steps_began: when the first step of this session began
        self.totals: dict = {}  # seconds spent on each extra ("validation", "probes", "checkpoint")
        self.base_validation_s = 0.0  # the base model's validation pass (before the first step)
        self.plan_judged = False  # whether the plan was judged against a useful run's steps
        self.val_batches_all = (
            costs.n_val_batches
        )  # the held-out rows' batches (a pass may keep fewer)

    def start(self) -> None:
        """The first step begins now."""
        self.mark, self.since = time.time(), 0
        self.steps_began = self.mark

    def spent(self) -> float:
        """Seconds of the budget used so far (earlier sessions of a resumed run included)."""
        return self.seconds - (self.deadline - time.time())

    def left(self) -> float:
        """Seconds to the deadline."""
        return max(0.0, self.deadline - time.time())

    def probe_seconds(self, final: bool = False) -> float:
        """How long probe answers may generate (their length varies); the last ones only in the
        time left before the save, 0 when there is none."""
        cap = self.costs.probe_cap
        if final:  # every rank calls this: under FSDP generating is collective, so rank 0 decides
            cap = min(cap, self.left() - self.costs.of("checkpoint", self.seconds_per_step()))
            cap = self.agree(cap) if self.agree is not None else cap
        return cap if cap > 0.05 else 0.0

    @contextlib.contextmanager
    def timed(self, kind: str):
        """Time one extra (validation, probes, checkpoint); it is not a step's time."""
        t = time.time()
        yield
        self.sync()
        took = time.time() - t
        self.costs.seen[kind] = took
        self.totals[kind] = self.totals.get(kind, 0.0) + took
        self.mark += took

    def after_step(self, step: int, total: int, trusted: bool = True) -> int:
        """The planned total after optimizer step ``step`` (``step`` itself: stop now).

        ``trusted=False``: the step compiled (``finetune.train.compiled``), so its seconds are
        not a step's: the window holding it is not measured. Every rank must pass the same (the
        loop passes it in one process only)."""
        self.since += 1
        self.untrusted = self.untrusted or not trusted
        if self.since < self.check_every:
            return total
        self.sync()
        now = time.time()
        settled = self.settled
        if self.first is None:
            self.first = (now - self.mark) / self.since
        elif not self.untrusted:
            self.windows.append((self.since, now - self.mark))
        self.mark, self.since, self.untrusted = now, 0, False
        decision = self._decide(step, now, settling=self.settled and not settled)
        if self.agree is not None:
            decision = self.agree(decision)
        total, self.check_every, self.cadence["validation"].passes = decision
        return total

    @property
    def settled(self) -> bool:
        """Whether the plan rests on ``MEASURE_STEPS`` timed steps (auto extras wait for it)."""
        return sum(n for n, _ in self.windows) >= MEASURE_STEPS

    def seconds_per_step(self) -> float:
        """The slower of two means: over the later half of the measured steps (the first ones
        still warm caches up) and over the last quarter (a machine that gets busy shows there;
        one batch of long rows does not swing it)."""
        if not self.windows:
            return self.first or 1e-9  # no step yet: none to time
        steps = sum(n for n, _ in self.windows)
        return max(
            self._mean_of_last(steps // 2), self._mean_of_last(max(MEASURE_STEPS, steps // 4)), 1e-9
        )

    def _mean_of_last(self, steps: int) -> float:
        n = seconds = 0
        for k, s in reversed(self.windows):
            n, seconds = n + k, seconds + s
            if n >= steps:
                break
        return seconds / n

    def _decide(self, step: int, now: float, settling: bool) -> tuple[int, int, int]:
        per = self.seconds_per_step()
        check_every = (
            max(1, int(min(CHECK_SECONDS, MARGIN_SHARE * self.seconds) / per))
            if self.settled
            else 1
        )
        validation = self.cadence["validation"]
        if settling and validation.every is None:  # decided once, before any auto pass
            cost = max(self.costs.of("validation", per), 1e-9)
            validation.passes = 1 + min(
                AUTO_PASSES - 1, int(VALIDATION_SHARE * self.seconds / cost)
            )
        left = self.deadline - now - self._reserve(per)
        if self.windows and self.windows[-1][1] / self.windows[-1][0] > left:
            return step, check_every, validation.passes  # not one more step at the latest speed
        lo, hi = (
            0,
            max(0, int(left / per)),
        )  # the most steps that fit, extras included (monotone in n)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if mid * per + self._extras(step, step + mid, per) <= left:
                lo = mid
            else:
                hi = mid - 1
        return step + lo, check_every, validation.passes

    def _reserve(self, per: float) -> float:
        """The end of the run: a validation pass, probe answers, the save, and a margin."""
        final = sum(self.costs.of(kind, per) for kind in ("probes", "checkpoint"))
        if self.costs.n_val_batches:
            final += self.costs.of("validation", per)
        return final + MARGIN_SHARE * self.seconds + per / 2

    def _extras(self, step: int, total: int, per: float) -> float:
        """Seconds of the validation passes, probes and checkpoints due in
        ``step + 1 .. total - 1``."""
        return sum(
            cadence.count(step, total) * self.costs.of(kind, per)
            for kind, cadence in self.cadence.items()
            if kind != "validation" or self.costs.n_val_batches
        )
