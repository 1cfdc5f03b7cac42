"""llama.cpp as a serving engine: one base GGUF in memory, each adapter a LoRA GGUF.

The base model is loaded once. A LoRA GGUF is read once per adapter file
(``llama_adapter_lora_init``) and attached to the context for one request at a time
(``llama_set_adapters_lora``, a pointer swap: the base weights are never touched). The prompt
is the GGUF's own chat template (the model's HF template, copied by the converter), rendered
with the same ``add_bos`` rule as the PyTorch path, and an answer ends at any end-of-generation
token of the GGUF's vocabulary. Requests run one at a time (one llama.cpp context); the KV
cache is reused across requests only while the adapter stays the same, since a cached
prefix computed under another adapter would be wrong.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from inference.generate import GenerationSettings, with_system
from inference.session import is_base, physical_cores
from serve.interface.stops import StopText, Utf8Pieces
from serve.interface.ticket import Ticket
from serve.one_at_a_time import OneAtATime

MAX_LORAS = 16  # LoRA GGUFs kept attached-ready; an r=16 SmolLM2 adapter is ~10 MB


def available() -> str | None:
    """None when llama.cpp's bindings import, else one sentence saying why not."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as err:
        return f"llama.cpp is not installed ({err}); `make setup` builds llama-cpp-python"
    return None


class LlamaEngine(OneAtATime):
    """Serves the base GGUF and LoRA GGUFs through one llama.cpp context.

    Args:
        base_gguf: the base model file.
        lora_gguf: maps an adapter name to its LoRA GGUF file (converting it when needed,
            e.g. :func:`adapters.export.gguf_cache.ensure_lora_gguf`); raises ValueError for
            an unknown or unusable adapter.
        n_ctx: context length (default: the model's training context, at most 8192).
        threads: decode threads (default: physical cores); ``cores_busy()`` True -> 1.
        label: what answers are labelled with, e.g. ``llama.cpp q8_0``.
    """

    name = "llama.cpp"

    def __init__(self, base_gguf: Path, lora_gguf: Callable[[str], Path], *, n_ctx: int | None = None,
                 threads: int | None = None, max_queue: int = 64, label: str | None = None,
                 cores_busy: Callable[[], bool] | None = None):
        from adapters.export.llama_tools import open_model

        self.threads = threads or physical_cores()
        self._max_queue = max_queue
        self.llm = open_model(base_gguf, n_ctx=n_ctx or 0, n_threads=self.threads,
                              n_threads_batch=self.threads, verbose=False)
        if not n_ctx and self.llm.n_ctx() > 8192:  # n_ctx=0 took the training context
            self.llm = open_model(base_gguf, n_ctx=8192, n_threads=self.threads,
                                  n_threads_batch=self.threads, verbose=False)
        self.base_gguf, self._lora_gguf, self._cores_busy = Path(base_gguf), lora_gguf, cores_busy
        self.label = label or f"llama.cpp {Path(base_gguf).stem}"
        self._loras: OrderedDict[Path, object] = OrderedDict()  # file -> llama_adapter_lora_p
        self._current: Path | None = None  # the LoRA attached now (None: the base)
        self._lock = threading.Lock()  # the context: one request (or a lora load) at a time
        self._formatter = _formatter(self.llm)
        super().__init__(max_queue=max_queue)

    def sibling(self) -> LlamaEngine:
        """Another context on the same GGUF files, with its own queue and worker (Compare
        decodes its panes side by side on siblings). The weights are memory-mapped, so the
        pages are shared; each sibling has its own KV cache."""
        return LlamaEngine(self.base_gguf, self._lora_gguf, n_ctx=self.llm.n_ctx(),
                           threads=self.threads, max_queue=self._max_queue, label=self.label,
                           cores_busy=self._cores_busy)

    def lora_file(self, adapter: str | None) -> Path | None:
        """The LoRA GGUF that answers for ``adapter`` (None for the base); ValueError if unusable."""
        return None if is_base(adapter) else Path(self._lora_gguf(adapter))

    def submit(self, messages: list[dict], adapter: str | None,
               settings: GenerationSettings | None = None, stop: list[str] | None = None,
               threads: int | None = None) -> Ticket:
        """Queue one answer; returns at once with its :class:`Ticket`. ``threads`` overrides
        the decode threads for this answer (Compare splits the cores between its panes).

        Raises:
            ValueError: bad settings or messages, a prompt too long, an unusable adapter.
            ServerBusy: ``max_queue`` requests are already waiting.
        """
        settings = settings or GenerationSettings()
        settings.check()
        name = None if is_base(adapter) else adapter
        lora = self.lora_file(name)
        prompt = self.encode(with_system(messages, settings))
        if len(prompt) >= self.llm.n_ctx():
            raise ValueError(f"the conversation is {len(prompt)} tokens; this model reads at most "
                             f"{self.llm.n_ctx()}: shorten the message or clear the chat")
        ticket = Ticket("base" if name is None else name, len(prompt), self._position)
        return self._enqueue(ticket, prompt, lora, settings, StopText(stop), threads)

    def encode(self, messages: list[dict]) -> list[int]:
        """Prompt tokens: the GGUF's chat template, BOS only where the template writes none
        (the rule ``inference.generate.encode`` follows with the HF tokenizer)."""
        if self._formatter is None:
            raise ValueError(f"{self.base_gguf.name} has no chat template; serve this model with "
                             "the PyTorch engine")
        text = self._formatter(messages=messages).prompt
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def attach(self, lora: Path | None) -> None:
        """Attach ``lora`` (None: no adapter) to the context; reads a new file once."""
        import llama_cpp

        with self._lock:
            if lora == self._current:
                return
            handles = []
            if lora is not None:
                handle = self._loras.get(lora)
                if handle is None:
                    handle = llama_cpp.llama_adapter_lora_init(self.llm.model, str(lora).encode())
                    if not handle:
                        raise ValueError(f"llama.cpp could not read the LoRA file {lora}")
                    self._loras[lora] = handle
                    self._evict(keep=lora)
                self._loras.move_to_end(lora)
                handles = [handle]
            array = (llama_cpp.llama_adapter_lora_p_ctypes * max(1, len(handles)))(*handles)
            scales = (ctypes.c_float * max(1, len(handles)))(*([1.0] * len(handles)))
            if llama_cpp.llama_set_adapters_lora(self.llm.ctx, array, len(handles), scales):
                raise RuntimeError(f"llama.cpp could not attach {lora or 'no adapter'}")
            self._current = lora
            self.llm.reset()  # the cached prefix was computed under the previous adapter

    def _evict(self, keep: Path) -> None:
        import llama_cpp

        while len(self._loras) > MAX_LORAS:
            old = next(p for p in self._loras if p not in (keep, self._current))
            llama_cpp.llama_adapter_lora_free(self._loras.pop(old))

    def _answer(self, ticket: Ticket, prompt: list[int], lora: Path | None,
                settings: GenerationSettings, stop: StopText, threads: int | None = None) -> None:
        self.attach(lora)
        with self._lock:
            self._set_threads(threads)
            reason = self._decode(ticket, prompt, settings, stop)
        ticket.put_text(stop.flush())
        ticket.finish(reason)

    def _decode(self, ticket: Ticket, prompt: list[int], settings: GenerationSettings,
                stop: StopText) -> str:
        llm, pieces = self.llm, Utf8Pieces()
        llm.set_seed(settings.seed)
        room = llm.n_ctx() - len(prompt)
        tokens = llm.generate(prompt, temp=settings.temperature, top_p=settings.top_p,
                              top_k=settings.top_k, min_p=0.0,
                              repeat_penalty=settings.repetition_penalty, reset=True)
        try:
            for token in tokens:
                if llama_is_eog(llm, token) and ticket.completion_tokens >= settings.min_new_tokens:
                    return "stop"
                ticket.completion_tokens += 1
                ticket.put_text(stop.feed(pieces.feed(llm.detokenize([token]))))
                if stop.hit:
                    return "stop"
                if ticket.cancelled:
                    return "cancelled"
                if ticket.completion_tokens >= min(settings.max_new_tokens, room):
                    ticket.put_text(stop.feed(pieces.flush()))
                    return "stop" if stop.hit else "length"
        finally:
            tokens.close()
        return "length"

    def _set_threads(self, threads: int | None = None) -> None:
        busy = False
        if self._cores_busy is not None:
            with suppress(Exception):
                busy = bool(self._cores_busy())
        n = 1 if busy else (threads or self.threads)
        self.llm._ctx.set_n_threads(n, n)


def llama_is_eog(llm, token: int) -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def _formatter(llm):
    """The GGUF's chat template as a llama-cpp-python formatter; None without a template."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    model = llm._model
    text = model.token_get_text
    return Jinja2ChatFormatter(template, eos_token=text(model.token_eos()), bos_token=text(model.token_bos()),
                               add_generation_prompt=True)

