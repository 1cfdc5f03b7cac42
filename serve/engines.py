"""Which engine answers: llama.cpp's own server on a CPU, PyTorch where it cannot or where a
crowd of mixed adapters arrives.

- ``llama.cpp`` (the default on a CPU): llama-server (serve/llama_server/), continuous
  batching, one LoRA per request. Beside TuneDesk's own PyTorch engine on the same machine it
  decodes several times as fast for one client and as fast or faster for many on one adapter
  (docs/benchmarks.md).
- ``pytorch``: the continuous-batching scheduler over the session (serve/batching/). The
  reference: evaluation uses the session directly, a GPU session always serves here, and it
  answers while llama-server is not built yet or failed to start. It decodes requests for
  different adapters in one batch, which llama-server does not (it batches only requests with
  the same LoRA set): with many clients over several adapters its first token comes far sooner
  and its aggregate is higher than llama-server's (docs/serving.md).

``auto`` therefore routes by the crowd: llama.cpp whenever it is ready, except that a request
goes to PyTorch when llama-server is busy with another adapter and the requests in flight
(this one included, and those waiting) reach ``mixed_crowd`` (``TUNEDESK_MIXED_CROWD``, default
8; 0 never), or while PyTorch still has such a crowd. Below that, such a request waits in the
gateway, first come first served, until llama-server is free for its adapter (llama-server
would make it wait as long: it decodes one LoRA set at a time), so that when a crowd forms the
waiting requests go to PyTorch instead of queueing behind each other's adapters. The two
never decode at once: PyTorch's batch starts when llama-server's answers in flight have ended
(both at once on a small CPU starve each other: first tokens came minutes late). So the
engine, and with greedy decoding possibly the answer, depends on the load: every answer is
labelled with the engine and weights that produced it (``Ticket.engine``; the API's
``system_fingerprint`` and ``X-TuneDesk-Engine`` header), and a request may pin one (``pin``;
the API's ``X-TuneDesk-Engine`` request header), which then answers it whatever the load.
"""

from __future__ import annotations

import os
import re
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable

from core.hashing import file_hash
from inference.generate import Answer, GenerationSettings
from inference.session import ModelSession
from serve.interface.bounds import AnswerTimeout, EngineStopping, answer_bound
from serve.interface.engine import Engine
from serve.interface.ticket import Ticket, answers_together
from serve.llama_server.factory import file_stamps, make_llama_engine

CHOICES = ("auto", "pytorch", "llama.cpp")
PINS = ("llama.cpp", "pytorch")
MIXED_CROWD_ENV = "TUNEDESK_MIXED_CROWD"


def mixed_crowd_default() -> int:
    """``TUNEDESK_MIXED_CROWD`` as a count (8 when unset).

    Raises:
        ValueError: it is not a whole number >= 0.
    """
    text = os.environ.get(MIXED_CROWD_ENV, "8").strip()
    if not text.isdigit():
        raise ValueError(
            f"{MIXED_CROWD_ENV} must be a whole number >= 0 (0: never route a crowd "
            f"to PyTorch), got {text!r}"
        )
    return int(text)


class Engines:
    """The serving engines over one session, and which of them answers.

    Args:
        session: the PyTorch model session (also the source of the GGUFs for llama.cpp).
        choice: ``auto``, ``pytorch`` or ``llama.cpp`` (``llama.cpp`` and ``auto`` answer with
            PyTorch until llama-server is ready; the status line says why).
        max_queue: waiting requests each engine accepts (the bound the Gradio queue has).
        llama_factory: builds the llama.cpp engine (default :func:`make_llama_engine`); may
            raise to say llama.cpp cannot serve this model.
        mixed_crowd: with ``auto``, the requests in flight from which one for another adapter
            than llama-server's goes to PyTorch (default ``TUNEDESK_MIXED_CROWD`` or 8; 0 never).
    """

    def __init__(
        self,
        session: ModelSession,
        choice: str = "auto",
        *,
        max_queue: int = 64,
        llama_factory: Callable | None = None,
        mixed_crowd: int | None = None,
    ):
        if choice not in CHOICES:
            raise ValueError(f"engine must be one of {', '.join(CHOICES)}, got {choice!r}")
        self.session, self.choice, self.max_queue = session, choice, max_queue
        self.mixed_crowd = mixed_crowd_default() if mixed_crowd is None else mixed_crowd
        self._crowd: Counter = Counter()  # (engine name, adapter) -> requests routed, not ended
        self._crowd_lock = threading.Condition()
        self._hashes: dict[tuple, str] = {}  # (adapter, file stamps) -> weights hash
        self._waiting: list[
            tuple[object, str]
        ] = []  # (request, adapter) waiting for llama-server, oldest first
        self._llama_factory = llama_factory or make_llama_engine
        self._lock = threading.Lock()
        self._pytorch: Engine | None = None
        self._llama: Engine | None = None
        self._starting = False
        self._watching = False
        self.llama_error: str | None = None  # why llama.cpp does not serve, while it does not
        self._llama_listeners: list[Callable[[], None]] = []  # told when a llama-server starts
        self.stopping = threading.Event()  # set by close(): answers in flight end with an error

    # -- building -------------------------------------------------------------------------

    def pytorch(self) -> Engine:
        """The PyTorch engine: the session's shared batching scheduler."""
        from serve.batching.scheduler import shared_scheduler

        with self._lock:
            if self._pytorch is None:
                self._pytorch = shared_scheduler(self.session)
                self._pytorch.hold = self._llama_busy  # one engine on the cores at a time
            return self._pytorch

    def _llama_busy(self) -> bool:
        """Whether llama-server has answers in flight (routed here)."""
        with self._crowd_lock:
            return any(name == "llama.cpp" for name, _ in self._crowd)

    def llama(self) -> Engine | None:
        """The llama.cpp engine once started, else None (``llama_error`` says why); starts it
        in the background as soon as it can be (llama-server built, a CPU session)."""
        if self._llama is not None or self.choice == "pytorch":
            return self._llama
        if cannot := self._llama_missing():
            self.llama_error = cannot  # checked again at the next request
            return None
        with self._lock:
            if self._starting or (self.llama_error or "").startswith("failed"):
                return None
            self._starting = True
        threading.Thread(target=self._start_llama, daemon=True, name="tunedesk-llama-start").start()
        return None

    def _llama_missing(self) -> str | None:
        """Why llama.cpp cannot start here now (a GPU session, llama-server not built: the
        build's progress while ``make run`` builds it), or None when it can."""
        from core.llama_cpp.binaries import missing_reason, server_binary

        if not self.session.device.startswith("cpu"):
            return "PyTorch serves on a GPU"
        return missing_reason() if server_binary() is None else None

    def _start_llama(self) -> None:
        try:
            self.llama_error = "llama-server is starting (converting the model to GGUF once)"
            engine = self._llama_factory(self.session, self.max_queue)
            self._llama, self.llama_error = engine, None
        except Exception as err:  # PyTorch keeps serving, with the reason on the page
            self.llama_error = f"failed to start: {type(err).__name__}: {err}"
            return
        finally:
            self._starting = False
        started = getattr(getattr(engine, "upstreams", None), "started", None)
        if isinstance(started, list):  # each new local server (a longer LoRA list) too
            started.append(self._llama_started)
        self._llama_started()

    def on_llama_start(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (in its own thread) whenever a llama-server starts to serve here:
        now if one serves already, then at each new local server."""
        self._llama_listeners.append(listener)
        if self._llama is not None:
            threading.Thread(target=listener, daemon=True, name="tunedesk-llama-started").start()

    def _llama_started(self) -> None:
        for listener in list(self._llama_listeners):
            threading.Thread(target=listener, daemon=True, name="tunedesk-llama-started").start()

    def prepare(self, wait: bool = True) -> None:
        """Load the model and start llama-server when it can serve (``wait``: until done)."""
        if not wait:
            threading.Thread(target=self.prepare, daemon=True, name="tunedesk-engines").start()
            return
        self.session.load()
        self.pytorch()
        if self.llama() is None and self._starting:
            while self._starting:
                threading.Event().wait(0.2)
        self.watch()

    def watch(self, every: float = 2.0) -> None:
        """Until llama-server serves (or failed to start), look for it every ``every`` seconds
        in the background: ``llama_error`` follows the build's progress for the status line,
        and the server starts as soon as ``make run``'s build has made the binary, with no
        request or restart needed. One watcher per instance; it ends by itself."""
        with self._lock:
            if self._watching or self.choice == "pytorch":
                return
            self._watching = True

        def look() -> None:
            try:
                while self._llama is None and not (self.llama_error or "").startswith(
                    ("failed", "PyTorch")
                ):
                    self.llama()
                    threading.Event().wait(every)
            finally:
                self._watching = False

        threading.Thread(target=look, daemon=True, name="tunedesk-llama-watch").start()

    # -- answering ------------------------------------------------------------------------

    def pick(self, adapter: str | None = None, pin: str | None = None) -> Engine:
        """The engine that would answer a request for ``adapter`` now (nothing is counted; one
        that would wait for llama-server is shown as llama.cpp).

        Raises:
            ValueError: ``pin`` is not an engine, or names llama.cpp where it does not serve.
        """
        with self._crowd_lock:
            return self._choose(_key(adapter), 1, pin, None) or self.llama()

    def route(
        self, adapters: list[str | None], pin: str | None = None, *, wait: bool = True
    ) -> tuple[Engine, Callable[[], None]]:
        """The engine for one request (or Compare's panes, ``adapters``), counted in the crowd
        until the returned ``release()`` is called (calling it again does nothing).

        With ``auto``, a request for another adapter than the ones llama-server is decoding
        waits here, first come first served (llama-server would make it wait just as long, as
        it batches one LoRA set at a time), until llama-server is free for it or the crowd is
        large enough to go to PyTorch (``wait`` False: it goes to llama-server at once).

        Raises:
            ValueError: as :meth:`pick`.
        """
        keys = [_key(a) for a in adapters]
        self._check_wait(float("inf"))
        with self._crowd_lock:
            engine = self._choose(keys[0], len(keys), pin, None)
            if engine is None and not wait:
                engine = self.llama()
            if engine is None:
                entry, give_up = (object(), keys[0]), time.monotonic() + answer_bound().total_s
                self._waiting.append(entry)
                self._crowd_lock.notify_all()  # the ones waiting count this one in their crowd
                try:
                    while engine is None:
                        self._crowd_lock.wait(0.5)
                        self._check_wait(give_up)
                        engine = self._choose(keys[0], len(keys), pin, self._waiting.index(entry))
                finally:
                    self._waiting.remove(entry)
            for key in keys:
                self._crowd[(engine.name, key)] += 1
            self._crowd_lock.notify_all()
        once = threading.Lock()

        def release() -> None:
            if once.acquire(blocking=False):
                with self._crowd_lock:
                    for key in keys:
                        self._crowd[(engine.name, key)] -= 1
                    self._crowd += Counter()  # drop the zeros
                    self._crowd_lock.notify_all()

        return engine, release

    def _check_wait(self, give_up: float) -> None:
        """Raise when a request waiting for llama-server must stop waiting: the server is
        stopping, or the wait reached the answer's whole bound."""
        if self.stopping.is_set():
            raise EngineStopping("the server is stopping; this request was not answered")
        if time.monotonic() >= give_up:
            raise AnswerTimeout(
                f"waited {answer_bound().total_s:g} s for llama-server to be free for this "
                "adapter (the answer timeout); the request was cancelled"
            )

    def close(self, reason: str = "the server is stopping; this answer was not finished") -> None:
        """Stop answering: every answer in flight or waiting ends now with ``EngineStopping``
        (the API says 503), without waiting for a step that may never end; new llama-servers
        are no longer told to this engine's listeners."""
        self.stopping.set()
        started = getattr(getattr(self._llama, "upstreams", None), "started", None)
        if isinstance(started, list) and self._llama_started in started:
            started.remove(self._llama_started)
        with self._crowd_lock:
            self._crowd_lock.notify_all()  # the requests waiting for llama-server give up
        if self._pytorch is not None:
            self._pytorch.close(EngineStopping(reason), wait=0)

    def crowd(self) -> dict[str, int]:
        """Requests in flight per engine, as routed here (``waiting``: for llama-server)."""
        with self._crowd_lock:
            out: dict[str, int] = {"waiting": len(self._waiting)} if self._waiting else {}
            for (name, _), count in self._crowd.items():
                out[name] = out.get(name, 0) + count
            return out

    def _choose(self, key: str, joining: int, pin: str | None, place: int | None) -> Engine | None:
        """The engine for a request for ``key``, or None: it waits for llama-server. ``place``:
        its index among the waiting requests (None: it has just come)."""
        if pin is not None:
            if pin not in PINS:
                raise ValueError(f"the engine pin must be one of {', '.join(PINS)}, got {pin!r}")
            if pin == "pytorch":
                return self.pytorch()
            llama = self.llama()
            if llama is None:
                raise ValueError(
                    f"llama.cpp does not serve here: {self.llama_error or 'set to pytorch'}"
                )
            return llama
        if self.choice == "pytorch":
            return self.pytorch()
        llama = self.llama()
        if llama is None:
            return self.pytorch()
        if self.choice == "llama.cpp" or not self.mixed_crowd:
            return llama
        if any(name == "pytorch" for name, _ in self._crowd):
            return self.pytorch()  # join the crowd PyTorch is answering
        crowd = sum(self._crowd.values()) + len(self._waiting) + (joining if place is None else 0)
        others_busy = any(name == "llama.cpp" and adapter != key for name, adapter in self._crowd)
        ahead = self._waiting if place is None else self._waiting[:place]
        others_ahead = any(adapter != key for _, adapter in ahead)
        if not (others_busy or others_ahead):
            return llama
        return self.pytorch() if crowd >= self.mixed_crowd else None

    def submit(
        self,
        messages: list[dict],
        adapter: str | None,
        settings: GenerationSettings | None = None,
        stop: list[str] | None = None,
        json_schema: dict | None = None,
        *,
        pin: str | None = None,
        routed: tuple[Engine, Callable[[], None]] | None = None,
    ) -> Ticket:
        """Queue one answer on the engine :meth:`route` picks (or ``routed``, already picked);
        the ticket's ``engine`` says which. ``json_schema`` (the answer must be JSON following
        it) needs llama.cpp and pins it.

        Raises:
            ValueError: bad settings or messages, an unusable adapter, a schema PyTorch cannot
                follow, a bad pin; ServerBusy: queue full.
        """
        if json_schema is not None and pin is None and routed is None:
            pin = "llama.cpp" if self.choice != "pytorch" and self.llama() is not None else None
        engine, release = routed or self.route([adapter], pin)
        try:
            if json_schema is not None:
                if getattr(engine, "name", "") != "llama.cpp":
                    raise ValueError(
                        "a JSON schema for the answer needs the llama.cpp engine, which "
                        f"does not serve here ({self.llama_error or 'set to pytorch'})"
                    )
                ticket = engine.submit(
                    messages, adapter, settings, stop=stop, json_schema=json_schema
                )
            else:
                ticket = engine.submit(messages, adapter, settings, stop=stop)
        except BaseException:
            release()
            raise
        ticket.engine = label(engine)
        ticket.when_done(release)
        return ticket

    def compare(
        self,
        messages: list[dict],
        adapters: list[str | None],
        settings: GenerationSettings | None = None,
        conversations: list[list[dict]] | None = None,
    ) -> tuple[list[Answer], str]:
        """Compare's answers (``None``: the base), all decoded at once, and one line saying how.

        ``conversations``: one per adapter (each pane grounded in its own knowledge), in place of
        ``messages``.

        Raises:
            ValueError: bad settings or messages, an unusable adapter; ServerBusy: queue full.
        """
        if not adapters:
            raise ValueError("Compare needs at least one pane: the base model or an adapter")
        hashes = [self.weights_hash(a) for a in adapters]
        engine, release = self.route(adapters, wait=False)
        try:
            asked = conversations or [messages] * len(adapters)
            submits = [
                lambda a=a, m=m: engine.submit(m, a, settings)
                for a, m in zip(adapters, asked, strict=True)
            ]
            answers = answers_together(submits, hashes)
        finally:
            release()
        seconds = answers[0].seconds if answers else 0.0
        n = len(answers)
        how = "1 answer decoded" if n == 1 else f"{n} answers decoded together"
        return answers, f"{how} on {label(engine)} in {seconds:.1f} s"

    def weights_hash(self, adapter: str | None) -> str:
        """The version of ``adapter`` (None: the base) that answers: its weights hash, read
        without loading the adapter into PyTorch (Compare's panes and feedback name it)."""
        from inference.session import WEIGHTS, is_base

        if is_base(adapter):
            self.session.load()
            return self.session.resolved.weight_hash
        folder = self.session.adapter_folder(adapter)
        try:
            key = (
                adapter,
                *file_stamps(folder),
            )  # read again only when its files change (once per answer)
        except ValueError:
            self.session.check_usable(adapter)  # says why in the session's own words
            raise
        if key not in self._hashes:
            manifest = self.session.check_usable(adapter)
            self._hashes[key] = str(manifest.get("adapter_hash") or file_hash(folder / WEIGHTS))
        return self._hashes[key]

    def describe(self) -> str:
        """One line for the page: which engine answers and why (it starts nothing)."""
        engine = self.pytorch() if self.choice == "pytorch" or self._llama is None else self._llama
        text = f"engine: {label(engine)}"
        if self.choice != "pytorch" and engine is not self._llama:
            why = self.llama_error or self._llama_missing() or "not started yet"
            if why.startswith("failed to start: "):  # it tried this model and could not
                text += (
                    f". llama.cpp cannot serve this model, so PyTorch answers "
                    f"({short_reason(why.removeprefix('failed to start: '))})"
                )
            else:
                text += f" (llama.cpp not serving: {why})"
        elif self.choice == "auto" and self.mixed_crowd:
            text += f"; PyTorch takes crowds of {self.mixed_crowd}+ over mixed adapters"
        if getattr(engine, "note", ""):
            text += f". {engine.note}"
        return text


def short_reason(error: str, limit: int = 120) -> str:
    """An exception's text for a status line: its first line, without exceptions' class
    names ("LlamaToolsError: ...", a converter's "NotImplementedError: ..."), cut to
    ``limit`` characters."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    first = re.sub(r"\b[A-Z]\w*(Error|Exception)\w*: ", "", lines[0] if lines else "")
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def _key(adapter: str | None) -> str:
    from inference.session import is_base

    return "base" if is_base(adapter) else str(adapter)


def release_with(owner, release: Callable[[], None]) -> None:
    """Call ``release`` when ``owner`` (an answer's stream) is garbage, if nothing did before:
    a stream a server drops unstarted never runs its ``finally``."""
    weakref.finalize(owner, release)


def label(engine) -> str:
    """What an answer is labelled with: engine name and weights (dtype or GGUF type)."""
    if engine is None:
        return "none"
    if getattr(engine, "label", None):
        return engine.label
    return f"pytorch {engine.session.dtype}, batched"
