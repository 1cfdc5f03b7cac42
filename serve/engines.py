"""Which engine answers: PyTorch (the reference) or llama.cpp, chosen by measuring this machine.

``auto`` times a short greedy decode on each available engine once per process (CPU flags
alone mislead: bf16 decoded faster than fp32 on a CPU without AVX512-BF16) and routes:

- one request at a time -> the engine with the fastest single stream (llama.cpp on the
  CPUs measured so far, see docs/benchmarks.md);
- several at once -> the continuous-batching scheduler when its aggregate at that many
  streams beats that single stream, otherwise the same single-stream engine, queued. The
  aggregate is measured at 1, 4 and 16 streams (interpolated between them, flat beyond): on 2
  EPYC cores it passed llama.cpp's single stream only from about 12 streams on.

Compare follows the same rule: on llama.cpp each pane decodes on its own context side by side
(:mod:`serve.llama_compare`); on PyTorch the panes are rows of the scheduler's batch.
PyTorch stays the reference: evaluation uses the session directly, and a GPU session never
routes to llama.cpp. Every answer is labelled with the engine that produced it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from inference.generate import Answer, GenerationSettings
from inference.session import ModelSession
from serve.interface.ticket import Ticket

CHOICES = ("auto", "pytorch", "llama.cpp")
PROBE = [{"role": "user", "content": "Where is my order? I ordered a blue jacket last week."}]
PROBE_TOKENS = 16
PROBE_STREAMS = (4, 16)  # concurrent streams at which the batching scheduler's aggregate is timed


class Engines:
    """The serving engines over one session, and the routing between them.

    Args:
        session: the PyTorch model session (also the source of the base model for llama.cpp).
        choice: ``auto``, ``pytorch`` or ``llama.cpp``.
        max_queue: waiting requests each engine accepts (the bound the Gradio queue has).
        llama_factory: builds the llama.cpp engine (default :func:`make_llama_engine`); may
            raise to say llama.cpp cannot serve this model.
    """

    def __init__(self, session: ModelSession, choice: str = "auto", *, max_queue: int = 64,
                 llama_factory: Callable | None = None):
        if choice not in CHOICES:
            raise ValueError(f"engine must be one of {', '.join(CHOICES)}, got {choice!r}")
        self.session, self.choice, self.max_queue = session, choice, max_queue
        self._llama_factory = llama_factory or make_llama_engine
        self._lock = threading.Lock()
        self._engines: dict[str, object] = {}
        self._panes = None  # Compare's llama.cpp contexts (LlamaCompare), built on first use
        self.llama_error: str | None = None  # why llama.cpp does not serve, when it does not
        self.rates: dict[str, float] = {}  # measured tokens/s per engine (auto)
        self._live: list[Ticket] = []
        self._preparing = False
        self._measuring = threading.Lock()

    # -- building -------------------------------------------------------------------------

    def pytorch(self):
        """The PyTorch engine: the batching scheduler when installed, else one at a time."""
        with self._lock:
            if "pytorch" not in self._engines:
                self._engines["pytorch"] = _torch_engine(self.session, self.max_queue)
            return self._engines["pytorch"]

    def llama(self):
        """The llama.cpp engine, or None (``llama_error`` says why)."""
        with self._lock:
            if "llama.cpp" not in self._engines and self.llama_error is None:
                if self.choice == "pytorch" or not self.session.device.startswith("cpu"):
                    self.llama_error = "PyTorch serves (GPU session or engine set to pytorch)"
                else:
                    try:
                        self._engines["llama.cpp"] = self._llama_factory(self.session, self.max_queue)
                    except Exception as err:  # any failure leaves PyTorch serving, with a reason
                        self.llama_error = f"{type(err).__name__}: {err}"
            return self._engines.get("llama.cpp")

    def prepare(self, wait: bool = True) -> None:
        """Build the engines and, for ``auto``, measure them (in a thread unless ``wait``)."""
        if not wait:
            with self._lock:
                if self._preparing:
                    return
                self._preparing = True
            threading.Thread(target=self.prepare, daemon=True, name="tunedesk-engines").start()
            return
        self.session.load()
        self.pytorch()
        if self.choice != "pytorch":
            self.llama()
        with self._measuring:
            if self.choice == "auto" and not self.rates:  # one engine: nothing to choose
                self.rates = measure(self._engines) if len(self._engines) > 1 else {"pytorch": 0.0}

    # -- answering ------------------------------------------------------------------------

    def submit(self, messages: list[dict], adapter: str | None,
               settings: GenerationSettings | None = None, stop: list[str] | None = None) -> Ticket:
        """Queue one answer on the engine the rule picks; the ticket's ``engine`` names it.

        Raises:
            ValueError: bad settings or messages, an unusable adapter; ServerBusy: queue full.
        """
        engine = self.pick()
        ticket = engine.submit(messages, adapter, settings, stop=stop)
        ticket.engine = label(engine)
        with self._lock:
            self._live = [t for t in self._live if not t.done] + [ticket]
        return ticket

    def compare(self, messages: list[dict], adapters: list[str | None],
                settings: GenerationSettings | None = None) -> tuple[list[Answer], str]:
        """Compare's answers (``None``: the base) on the engine the rule picks, and one line
        saying how they were decoded.

        Raises:
            ValueError: bad settings or messages, an unusable adapter; ServerBusy: queue full.
        """
        engine = self.pick()
        if getattr(engine, "name", "") == "llama.cpp":
            panes = self._llama_compare(engine)
            answers = panes.compare(messages, adapters, settings)
            threads = panes.threads_per_pane(len(adapters))
            how = (f"side by side on {engine.label} (one context per pane, {threads} "
                   f"thread{'s' if threads > 1 else ''} each)")
        else:
            from serve.batching.chat import compare

            answers = compare(self.session, messages, adapters, settings)
            how = f"together in one batch on {label(self.pytorch())}"
        seconds = answers[0].seconds if answers else 0.0
        return answers, f"{len(answers)} answers decoded {how} in {seconds:.1f} s"

    def _llama_compare(self, engine):
        from serve.llama_compare import LlamaCompare

        with self._lock:
            if self._panes is None or self._panes.engine is not engine:
                self._panes = LlamaCompare(engine, self.session.resolved.weight_hash)
            return self._panes

    def pick(self):
        """The engine for the next request (see the module docstring)."""
        if self.choice == "pytorch":
            return self.pytorch()
        if self.choice == "llama.cpp":
            return self.llama() or self.pytorch()
        if not self.rates:  # not measured yet: PyTorch answers meanwhile, nobody waits
            self.prepare(wait=False)
            return self.pytorch()
        with self._lock:
            busy = sum(not t.done for t in self._live)
        single = max(("pytorch", "llama.cpp"), key=lambda n: self.rates.get(n, 0.0))
        if busy and batched_rate(self.rates, busy + 1) > self.rates.get(single, 0.0):
            return self.pytorch()
        return self._engines.get(single) or self.pytorch()

    def describe(self) -> str:
        """One line for the page: which engine answers and why."""
        if self.choice != "auto" or len(self.rates) < 2:
            engine = self._engines.get("pytorch" if self.choice == "auto" else self.choice)
            text = f"engine: {label(engine) if engine else self.choice}"
            if self.choice == "auto" and not self.rates:
                text += " (auto: measuring the engines)"
        else:
            single = max(("pytorch", "llama.cpp"), key=lambda n: self.rates.get(n, 0.0))
            rates = ", ".join(f"{k} {v:.0f}" for k, v in self.rates.items())
            text = f"engine: {label(self._engines[single])} (auto; measured tok/s: {rates})"
        return text + (f"; llama.cpp off: {self.llama_error}" if self.llama_error and self.choice != "pytorch" else "")


def label(engine) -> str:
    """What an answer is labelled with: engine name and weights (dtype or GGUF type)."""
    if engine is None:
        return "none"
    if getattr(engine, "label", None):
        return engine.label
    batched = "" if getattr(engine, "name", "") == "pytorch" else ", batched"
    return f"pytorch {engine.session.dtype}{batched}"


def _torch_engine(session: ModelSession, max_queue: int):
    try:
        from serve.batching.scheduler import shared_scheduler
    except ImportError:  # continuous batching not installed: one answer at a time
        from serve.serial import SerialEngine

        return SerialEngine(session, max_queue=max_queue)
    return shared_scheduler(session)  # the one batch Chat and Compare also feed


def make_llama_engine(session: ModelSession, max_queue: int = 64, outtype: str = "q8_0"):
    """llama.cpp over the session's base model: GGUFs converted once by the export code."""
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
    from serve.llama_engine import LlamaEngine, available

    reason = available()
    if reason:
        raise RuntimeError(reason)
    base = ensure_base_gguf(session.resolved, outtype)
    home = session.adapter_folder("probe").parent.parent  # the session's shelf, wherever it is
    known: dict[tuple, object] = {}

    def lora_file(name: str):
        # ensure_lora_gguf hashes the weights each call; skip that while the files are unchanged
        key = (name, *_stamps(session.adapter_folder(name)))
        if key not in known:
            known[key] = ensure_lora_gguf(name, home=home)
        return known[key]

    return LlamaEngine(base, lora_file, max_queue=max_queue, label=f"llama.cpp {outtype}",
                       cores_busy=session.cores_busy)


def _stamps(folder) -> tuple[int, ...]:
    from inference.session import MANIFEST, WEIGHTS

    try:
        return tuple((folder / f).stat().st_mtime_ns for f in (MANIFEST, WEIGHTS))
    except OSError as err:
        raise ValueError(f"adapter {folder.name!r} is not on the shelf ({err.strerror})") from None

def batched_rate(rates: dict[str, float], streams: int) -> float:
    """The batching scheduler's aggregate tokens/s at ``streams`` concurrent streams, from the
    measured ones (``batched xN``; one stream: PyTorch's single stream): linear between
    measured counts, the largest measured beyond them, 0 when none was measured."""
    points = sorted((int(k.split("x")[-1]), v) for k, v in rates.items() if k.startswith("batched x"))
    if not points:
        return 0.0
    points = [(1, rates.get("pytorch", 0.0)), *points]
    for (n0, r0), (n1, r1) in zip(points, points[1:], strict=False):
        if streams <= n1:
            return r0 + (r1 - r0) * (max(streams, n0) - n0) / (n1 - n0)
    return points[-1][1]


def measure(engines: dict, tokens: int = PROBE_TOKENS) -> dict[str, float]:
    """Decode tokens/s of each engine's single stream (and the scheduler's aggregate at each
    of ``PROBE_STREAMS`` concurrent streams, ``batched xN``), after one warm-up answer each."""
    settings = GenerationSettings(max_new_tokens=tokens, min_new_tokens=tokens, temperature=0)
    rates = {}
    for name, engine in engines.items():
        engine.submit(PROBE, None, GenerationSettings(max_new_tokens=2)).text()  # warm-up
        start = time.perf_counter()
        ticket = engine.submit(PROBE, None, settings)
        ticket.text()
        rates[name] = ticket.completion_tokens / (time.perf_counter() - start)
        if name == "pytorch" and getattr(engine, "name", "") != "pytorch":  # the batching scheduler
            for streams in PROBE_STREAMS:
                start = time.perf_counter()
                tickets = [engine.submit(PROBE, None, settings) for _ in range(streams)]
                for t in tickets:
                    t.text()
                done = sum(t.completion_tokens for t in tickets)
                rates[f"batched x{streams}"] = done / (time.perf_counter() - start)
    return rates
