"""Continuous batching: many requests, for the base and any shelf adapters, decoded together.

One background thread owns the running batch. Between two decode steps it drops the rows
that ended or were cancelled, admits waiting requests that fit (``limits.py``), prefills
their prompts together (left-padded, one forward pass), joins their KV caches to the batch
(``batch_cache.py``) and hands each its first token; then it runs one decode step for every
row and streams each row's new text to its :class:`~serve.interface.ticket.Ticket`.

Rows of different adapters share a step the way Compare's panes do: one adapter for all
rows -> merged weights (``merged.py``), the base -> adapter layers off, a mix -> per-row
masked LoRA updates (``row_routing.py``), other LoRA kinds -> PEFT's ``adapter_names``. Each
step holds the session lock only for itself, so other callers (evaluation, a Compare not
routed here) interleave between steps and never see the batch's routing.

Every row computes what it would alone: its own positions, its own causal mask (padding is
masked), its own adapter, its own sampler (``decoding.py``). Greedy fp32 answers equal the
solo answers token for token (tests/serve/batching/test_scheduler.py).

A model it cannot batch (attention soft-capping, cache layers other than full or sliding
attention: ``support.py``) is found before its first answer and served one request at a time
by plain ``generate`` (``solo.py``), labelled ``unbatched``; sliding-window models are batched
on full-attention caches (``batch_cache.fresh_cache``). Whatever fails inside the thread fails
the requests it touched (the ones being admitted included), never leaves one waiting, and the
thread goes on; if the thread itself ends, the next ``submit`` starts another. Each step touches
the waiting requests' idle clocks (``serve/interface/bounds.py``): they wait on a working
engine, not a stuck one.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from core.limits import KvBudget, device_free_bytes
from inference.generate import (
    GenerationSettings,
    context_limit,
    encode,
    fitting,
    session_stop_ids,
    with_system,
)
from inference.session import ModelSession, check_base, is_base, read_adapter_folder
from serve.batching.batch_cache import BatchCache
from serve.batching.decoding import TextStream, TokenChooser, accept_token
from serve.batching.packed_prefill import can_pack, packed_prefill
from serve.batching.prefill import prefill_prompts, store_row
from serve.batching.prefix_cache import MEMORY_SHARE, PrefixCache
from serve.batching.solo import answer_alone
from serve.batching.step_routes import StepRouter
from serve.batching.support import batching_refusal
from serve.interface.bounds import EngineStopping
from serve.interface.ticket import ServerBusy, Ticket

PREFILL_TOKENS = 1024  # prompt tokens prefilled between two decode steps (always >= 1 prompt)
POLICY_SECONDS = 1.0  # how often to ask whether a training run shares the cores
IDLE_SECONDS = 30.0  # the decode thread ends after this long without work (submit restarts it)
HOLD_POLL_SECONDS = 0.01  # how often a held batch asks again
CLOSE_JOIN_SECONDS = 5.0  # close() waits this long for the decode thread (a stuck step never ends)
_UNKNOWN = object()  # whether the model can be batched, before it is loaded
# prompts of different lengths prefilled without padding (packed_prefill.py); 0 pads them
PACKED_PREFILL = os.environ.get("TUNEDESK_PACKED_PREFILL", "1").strip() != "0"


def within_positions(
    settings: GenerationSettings, prompt_tokens: int, positions: int | None
) -> GenerationSettings:
    """``settings`` with the answer ending where the model's positions do (``finish_reason``
    length), as a llama-server slot ends it: past them the model reads what it was never
    trained to, and the row would reserve cache it cannot use."""
    room = None if positions is None else positions - prompt_tokens  # >= 1: the prompt fitted
    if room is None or settings.max_new_tokens <= room:
        return settings
    return replace(settings, max_new_tokens=room, min_new_tokens=min(settings.min_new_tokens, room))


@dataclass(eq=False)
class _Request:
    ticket: Ticket
    prompt: list[int]
    adapter: str | None  # shelf name; None = base
    settings: GenerationSettings
    stream: TextStream
    chooser: TokenChooser | None = None
    peft: str | None = None  # the adapter's name inside PEFT, set when admitted
    digest: str = ""  # its adapter hash when admitted (a retrained adapter fails the row)
    last: int = 0  # the token fed at the next step

    @property
    def reserve(self) -> int:
        return len(self.prompt) + self.settings.max_new_tokens

    @property
    def version(self) -> tuple | None:
        """Whose keys and values this row computes: None for the base, else (adapter, hash)."""
        return None if self.adapter is None else (self.adapter, self.digest)


class Scheduler:
    """Serves requests through one ``ModelSession`` with continuous batching.

    Args:
        session: the model session (its lock and thread policy are respected).
        max_batch: rows decoded together; default from free memory (``limits.py``).
        max_queue: waiting requests beyond which ``submit`` raises :class:`ServerBusy`.
        prefix_bytes: memory for reused prompt beginnings (``prefix_cache.py``); default a
            share of the memory free on the model's device at the first request, 0 turns the
            reuse off.

    ``hold``, when set, is asked before a batch starts: while it says True, waiting requests
    wait (another engine has the cores; two engines decoding at once on the same cores starve
    each other, docs/serving.md).
    """

    def __init__(
        self,
        session: ModelSession,
        *,
        max_batch: int | None = None,
        max_queue: int = 64,
        prefix_bytes: int | None = None,
    ):
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.session, self.max_queue, self._max_batch = session, max_queue, max_batch
        self.prefix = PrefixCache(0 if prefix_bytes is None else prefix_bytes)
        self._prefix_bytes = prefix_bytes
        self._cond = threading.Condition()
        self._waiting: deque[_Request] = deque()
        self._rows: list[_Request] = []
        self._admitting: list[_Request] = []  # taken from the queue, not yet rows of the batch
        self._refusal = _UNKNOWN  # why the model cannot be batched (None: it can)
        self._batch = BatchCache()
        self._budget: KvBudget | None = None
        self._closed, self._policy_at = False, 0.0
        self._router = StepRouter(session)
        self._thread: threading.Thread | None = None  # started by submit, ends when idle
        self.hold: Callable[[], bool] | None = None

    name = "pytorch"

    @property
    def label(self) -> str:
        refusal = self.unbatched_reason()
        how = "batched" if refusal is None else f"unbatched ({refusal})"
        return f"pytorch {self.session.dtype}, {how}"

    def unbatched_reason(self) -> str | None:
        """Why this model is answered one request at a time (``support.py``), or None; None
        too until the model is loaded (nothing is loaded to find out)."""
        if self._refusal is _UNKNOWN and self.session.status()["state"] == "ready":
            self._refusal = batching_refusal(self.session.model)
        return None if self._refusal is _UNKNOWN else self._refusal

    # -- the clients' side ----------------------------------------------------------------

    def submit(
        self,
        messages: list[dict],
        adapter: str | None,
        settings: GenerationSettings | None = None,
        stop: list[str] | None = None,
    ) -> Ticket:
        """Queue one answer; returns at once with its :class:`Ticket`.

        Raises:
            ValueError: bad settings or messages, a prompt too long, an unknown adapter or
                one trained on another base model.
            ServerBusy: ``max_queue`` requests are already waiting.
        """
        settings = settings or GenerationSettings()
        settings.check()
        name = None if is_base(adapter) else adapter
        if name is not None:  # a clear error now, not a failed stream later
            check_base(
                name,
                read_adapter_folder(name, self.session.adapter_folder(name)),
                self.session.resolved,
            )
        inputs = fitting(self.session, encode(self.session, [with_system(messages, settings)]))
        prompt = inputs["input_ids"][0].tolist()
        settings = within_positions(settings, len(prompt), context_limit(self.session))
        ticket = Ticket("base" if name is None else name, len(prompt), self._position)
        request = _Request(ticket, prompt, name, settings, TextStream(self.session.tokenizer, stop))
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            if len(self._waiting) >= self.max_queue:
                raise ServerBusy(
                    f"server busy: {len(self._waiting)} requests are already waiting; "
                    "try again in a moment"
                )
            self._waiting.append(request)
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="tunedesk-batch"
                )
                self._thread.start()
        return ticket

    def status(self) -> dict:
        """Rows decoding, requests waiting, and the batch cap (None until the first request)."""
        budget = self._budget
        return {
            "running": len(self._rows),
            "waiting": len(self._waiting),
            "max_batch": budget.max_batch if budget else self._max_batch,
            "kv_budget_bytes": budget.bytes if budget else None,
            "prefix_cache": self.prefix.status(),
        }

    def close(self, error: BaseException | None = None, wait: float = CLOSE_JOIN_SECONDS) -> None:
        """Stop the decode thread; unfinished requests fail at once with ``error`` (default: the
        server closed). Waits at most ``wait`` seconds for the thread (0: not at all)."""
        error = error or EngineStopping("the server closed before this answer was finished")
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
            left = [*self._waiting, *self._admitting, *self._rows]
        for request in left:  # their readers hear it now, even while a step is running
            request.ticket.fail(error)
        if wait and thread is not None and threading.current_thread() is not thread:
            thread.join(wait)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _position(self, ticket: Ticket) -> int:
        with self._cond:
            for place, request in enumerate(self._waiting, start=1):
                if request.ticket is ticket:
                    return place
        return 0

    # -- the decode thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._wait_for_work():
                try:
                    self._work()
                except (
                    Exception
                ) as err:  # a failed step fails the rows it touched; the thread goes on
                    self._fail_running(err)
        finally:  # closed, idle, or ended by something unforeseen: nobody is left waiting
            self._let_go()

    def _let_go(self) -> None:
        """The decode thread ends: closed or broken, every request it held fails (ended idle,
        it holds none, and a newer thread may own the batch already)."""
        with self._cond:
            if self._thread is not threading.current_thread():
                return
            self._thread = None  # the next submit starts another
            left, self._waiting = [*self._waiting, *self._admitting, *self._rows], deque()
        self._fail_running(
            EngineStopping("the server closed before this answer was finished")
            if self._closed
            else RuntimeError("the decode thread ended"),
            left,
        )

    def _wait_for_work(self) -> bool:
        """Wait for requests; False once closed or idle for ``IDLE_SECONDS`` (the thread ends)."""
        with self._cond:
            idle_until = time.monotonic() + IDLE_SECONDS
            while not (self._closed or self._waiting or self._rows):
                if time.monotonic() >= idle_until:  # let go of the session when unused
                    self._thread = None  # under the lock: a submit from now on starts another
                    return False
                self._cond.wait(IDLE_SECONDS)
            return not self._closed

    def _work(self) -> None:
        """Admit and decode one step (or, for a model it cannot batch, answer one request)."""
        self._drop_ended()
        self._heartbeat()
        if not self._rows and self.hold is not None and self.hold():
            time.sleep(HOLD_POLL_SECONDS)
            return
        if self.unbatched_reason() is not None:
            self._answer_one()
            return
        self._admit()
        if self._rows:
            self._step()

    def _fail_running(self, err: BaseException, requests: list[_Request] | None = None) -> None:
        """Fail ``requests`` (default: the rows and those being admitted) and empty the batch."""
        for request in self._rows + self._admitting if requests is None else requests:
            request.ticket.fail(err)
        self._rows, self._admitting, self._batch = [], [], BatchCache()

    def _heartbeat(self) -> None:
        """The waiting requests' idle clocks start again: the engine is working,
        they wait their turn."""
        now = time.monotonic()
        with self._cond:
            for request in self._waiting:
                request.ticket.touch(now)

    def _answer_one(self) -> None:
        """The next waiting request, answered alone by plain ``generate`` (``solo.py``)."""
        with self._cond:
            if not self._waiting:
                return
            request = self._waiting.popleft()
            self._admitting = [request]
        answer_alone(self.session, request, self._heartbeat)
        self._admitting = []

    def _take(self, tokens_left: int = PREFILL_TOKENS) -> list[_Request]:
        """Waiting requests that fit beside the running rows now, first come first served, with
        at most ``tokens_left`` prompt tokens (always one request when it fits otherwise)."""
        if self._budget is None:
            element = torch.empty(0, dtype=getattr(torch, self.session.dtype)).element_size()
            free = device_free_bytes(self.session.device)  # the GPU's own memory on CUDA
            self._budget = KvBudget(self.session.model.config, element, self._max_batch, free)
            if self._prefix_bytes is None:
                self.prefix.max_bytes = int(MEMORY_SHARE * free)
        group, tokens = [], 0
        with self._cond:
            while self._waiting:
                request = self._waiting[0]
                if request.ticket.cancelled:
                    self._waiting.popleft().ticket.finish("cancelled")
                    continue
                rows = [*self._rows, *group, request]
                adapters = {r.adapter for r in rows if r.adapter}
                if (
                    not self._budget.fits(len(rows), max(r.reserve for r in rows))
                    or len(adapters) > self.session.max_loaded_adapters
                    or (group and tokens + len(request.prompt) > tokens_left)
                ):
                    break
                group.append(self._waiting.popleft())
                tokens += len(request.prompt)
        return group

    def _admit(self) -> None:
        """Prefill the requests that fit and join them to the batch with their first token.

        Requests that arrive during a prefill are admitted before the next decode step, up to
        ``PREFILL_TOKENS`` prompt tokens in all: clients arriving together get their first
        tokens together instead of one decode step apart, and running rows wait at most one
        prefill budget.
        """
        budget = PREFILL_TOKENS
        while budget > 0:
            group = self._take(budget)
            if not group:
                return
            self._admitting = group
            budget -= sum(len(r.prompt) for r in group)
            self._admit_group(group)

    def _admit_group(self, group: list[_Request]) -> None:
        with self.session.lock:
            self._policy()
            keep = {r.adapter for r in [*self._rows, *group] if r.adapter}
            # rows of one adapter side by side: a prompt's LoRA update then runs each adapter
            # on its own rows only (row_routing.py), not every adapter on every row
            ready = sorted((r for r in group if self._load(r, keep)), key=lambda r: r.adapter or "")
            try:
                parts = [(ready, self._prefill(ready))] if ready else []
            except Exception:  # find the request at fault: the others still get answers
                parts = []
                for request in ready:
                    try:
                        parts.append(([request], self._prefill([request])))
                    except Exception as err:
                        request.ticket.fail(err)
        for rows, (cache, mask, logits) in parts:
            try:
                self._batch.join(cache, mask)
            except (
                Exception
            ) as err:  # a cache this batch cannot take: these rows fail, the batch goes on
                for request in rows:
                    request.ticket.fail(err)
                continue
            self._rows.extend(rows)
            self._consume(rows, logits)
        self._admitting = []
        self._drop_ended()

    def _load(self, request: _Request, keep: set[str]) -> bool:
        """Load the request's adapter (never evicting one the batch uses) and its sampler."""
        try:
            if request.adapter is not None:
                loaded = self.session.ensure_adapter(request.adapter, keep=keep)
                request.peft, request.digest = loaded.peft_name, loaded.adapter_hash
            request.chooser = TokenChooser(
                request.settings, list(session_stop_ids(self.session)), request.prompt
            )
            return True
        except Exception as err:
            request.ticket.fail(err)
            return False

    def _prefill(self, rows: list[_Request]):
        """One forward pass over the rows' prompts: their cache, mask and last logits."""
        pad = self.session.tokenizer.pad_token_id or 0
        model, pefts = self.session.model, [r.peft for r in rows]
        packed = None
        # CPU only: measured there; on a GPU the padded prefill stays until a GPU checks it
        if (
            PACKED_PREFILL
            and str(self.session.device).startswith("cpu")
            and can_pack(model)
            and self._router.packs(pefts)
        ):
            packed = functools.partial(packed_prefill, model, self._router.forward)
        return prefill_prompts(self._router.forward, self.prefix, rows, pad, packed)

    def _step(self) -> None:
        """One decode step for every running row."""
        with self.session.lock:
            self._policy()
            self._refresh_adapters()
            self._drop_ended()
            if not self._rows:
                return
            rows = list(self._rows)
            last = torch.tensor([r.last for r in rows], dtype=torch.long)
            out = self._router.forward([r.peft for r in rows], self._batch.step_inputs(last))
            self._batch.advance()
        self._consume(rows, out.logits[:, -1])
        self._drop_ended()

    def _consume(self, rows: list[_Request], logits: torch.Tensor) -> None:
        """Choose each row's next token from ``logits`` (rows, vocab) and stream it."""
        # float32 on the CPU, as generate does: the samplers' generators and histories live there
        logits = logits.to(device="cpu", dtype=torch.float32)
        best = logits.argmax(dim=-1).tolist()
        stop_ids = set(session_stop_ids(self.session))
        for i, request in enumerate(rows):
            try:
                token = request.chooser.choose(logits[i], best[i])
                accept_token(request, token, stop_ids)
            except Exception as err:  # this row's sampler failed; its neighbours go on
                request.ticket.fail(err)

    def _drop_ended(self) -> None:
        """Remove finished, failed and cancelled rows from the batch; keep the finished rows'
        conversations (prompt + answer) for the next turn's prompt (``prefix_cache.py``)."""
        keep = []
        for i, request in enumerate(self._rows):
            if request.ticket.cancelled:
                request.ticket.finish("cancelled")
            if not request.ticket.done:
                keep.append(i)
            elif request.ticket.error is None and request.ticket.finish_reason in (
                "stop",
                "length",
            ):
                self._store_conversation(i, request)
        if len(keep) != len(self._rows):
            self._batch.keep(keep)
            self._rows = [self._rows[i] for i in keep]

    def _store_conversation(self, row: int, request: _Request) -> None:
        """Keep the tokens row ``row`` holds (its prompt and the answer tokens fed back so
        far: the last answer token never was) for the next turn."""
        held = int(self._batch.positions[row])
        tokens = (request.prompt + request.stream.ids)[:held]
        if len(tokens) > len(request.prompt):
            store_row(
                self.prefix, request.version, tokens, self._batch.cache, self._batch.mask, row
            )

    def _refresh_adapters(self) -> None:
        """Keep the batch's adapters loaded (another caller may have evicted one)."""
        names = {r.adapter for r in self._rows if r.adapter}
        for name in names:
            try:
                loaded = self.session.ensure_adapter(name, keep=names)
            except Exception as err:
                loaded, error = None, err
            for request in (r for r in self._rows if r.adapter == name):
                if loaded is not None and loaded.adapter_hash == request.digest:
                    request.peft = loaded.peft_name
                elif loaded is not None:
                    request.ticket.fail(
                        RuntimeError(f"adapter {name!r} changed on the shelf during the answer")
                    )
                else:
                    request.ticket.fail(error)

    def _policy(self) -> None:
        """The session's thread policy (one thread while training runs), asked once a second."""
        now = time.monotonic()
        if now - self._policy_at >= POLICY_SECONDS:
            self.session.set_threads(torch)
            self._policy_at = now


_SHARED_LOCK = threading.Lock()
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> its scheduler


def shared_scheduler(session: ModelSession) -> Scheduler:
    """The one scheduler of ``session`` that Chat, Compare and the API share, made on first use.

    Kept beside the session (a weak mapping), so it lives and goes with it (its decode thread
    ends when idle, so nothing keeps an unused session alive).
    """
    with _SHARED_LOCK:
        scheduler = _SHARED.get(session)
        if scheduler is None or scheduler._closed:
            scheduler = _SHARED[session] = Scheduler(session)
        return scheduler


__all__ = ["Scheduler", "ServerBusy", "Ticket", "shared_scheduler"]
