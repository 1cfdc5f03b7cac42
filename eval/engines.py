"""Which engine answers an evaluation's prompts: llama.cpp's llama-server, as Chat and ``/v1``
serve on a CPU, or the PyTorch session.

- ``llama.cpp``: the serving engine itself (:func:`serve.llama_server.factory.make_llama_engine`,
  the GGUF precision Chat uses), so the answers the release gate checks are the answers customers
  get. Many requests are in flight at once, so llama-server's parallel slots decode together;
  the models go one after another, because llama-server batches only requests with the same
  LoRA set.
- ``pytorch``: the session's batched ``generate`` (:mod:`eval.answers`), the reference.
- ``auto``: llama.cpp where llama-server is built, the session is on a CPU (where llama.cpp
  serves) and the base model and every adapter convert to GGUF; else PyTorch, with the sentence
  why.

Both take the same prompt token ids and return the same :class:`eval.answers.Generated`
records; perplexity stays PyTorch's either way (``eval.run``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from eval.answers import BASE_LABEL, Generated, answer_all, decode, generate_kwargs
from inference.generate import GenerationSettings
from inference.session import ModelSession

ENGINES = ("auto", "llama.cpp", "pytorch")
IN_FLIGHT = 16  # requests sent at once: make_llama_engine's default slot count


class LlamaUnavailable(RuntimeError):
    """llama.cpp cannot answer here (the sentence says why)."""


class TorchAnswerer:
    """Answers with the PyTorch session, ``batch_size`` prompts per ``generate`` call."""

    name = "pytorch"

    def __init__(self, session: ModelSession, batch_size: int, note: str = ""):
        self.session, self.batch_size, self.note = session, batch_size, note

    @property
    def label(self) -> str:
        return f"pytorch {self.session.dtype}"

    def answer(
        self,
        prompt_ids: list[list[int]],
        adapters: list[str],
        settings: GenerationSettings,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, list[Generated]]:
        """``{"base": [...], adapter: [...]}``: every prompt answered by every model, in order."""
        return answer_all(
            self.session, prompt_ids, adapters, settings, self.batch_size, on_progress
        )

    def close(self) -> None:
        """Nothing to stop: the session stays loaded for perplexity."""


class LlamaAnswerer:
    """Answers through a llama.cpp serving engine, ``in_flight`` requests at once.

    Args:
        engine: a :class:`serve.llama_server.engine.LlamaServerEngine` (closed by :meth:`close`).
        in_flight: requests sent together (llama-server's parallel slots).
    """

    name = "llama.cpp"

    def __init__(self, engine, in_flight: int = IN_FLIGHT):
        from serve.llama_server.engine import KEEPALIVE_S

        self.engine, self.in_flight = engine, in_flight
        self.label, self.note = engine.label, engine.note
        limits = httpx.Limits(max_connections=in_flight + 4, keepalive_expiry=KEEPALIVE_S)
        self._http = httpx.Client(limits=limits, timeout=httpx.Timeout(600.0, connect=10.0))

    def answer(
        self,
        prompt_ids: list[list[int]],
        adapters: list[str],
        settings: GenerationSettings,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, list[Generated]]:
        """``{"base": [...], adapter: [...]}``: every prompt answered by every model, in order.

        Raises:
            ValueError: a prompt longer than a slot holds, or an unusable adapter.
            RuntimeError: llama-server failed.
        """
        session = self.engine.session
        stop = set(generate_kwargs(session, settings)["eos_token_id"])
        out, done, total = {}, 0, len(prompt_ids) * (1 + len(adapters))
        for label, name in zip([BASE_LABEL, *adapters], [None, *adapters], strict=True):
            lora = None if name is None else self.engine.lora_path(name)
            with ThreadPoolExecutor(
                self.in_flight, thread_name_prefix="tunedesk-eval-llama"
            ) as pool:
                futures = [pool.submit(self.complete, ids, lora, settings) for ids in prompt_ids]
                out[label] = []
                for future in futures:
                    tokens, ended = future.result()
                    answer = decode(session, tokens, stop)
                    answer.stopped = answer.stopped or ended
                    out[label].append(answer)
                    done += 1
                    if on_progress:
                        on_progress(done, total)
        return out

    def complete(
        self, ids: list[int], lora, settings: GenerationSettings
    ) -> tuple[list[int], bool]:
        """llama-server's answer to token ids ``ids`` (with LoRA file ``lora``, or the base):
        its token ids, and whether it ended its turn."""
        from serve.llama_server.engine import completion_body, stale

        ctx = self.engine.ctx_per_slot
        if len(ids) + 1 >= ctx:
            raise ValueError(f"a prompt is {len(ids)} tokens; a llama-server slot holds {ctx - 1}")
        upstreams = self.engine.upstreams
        upstream = upstreams.acquire(lora, self.engine.known_loras)
        try:
            body = {
                **completion_body(ids, settings, None, ctx),
                "stream": False,
                "lora": upstream.lora_scales(lora),
            }
            for attempt in (1, 2):
                try:
                    reply = self._http.post(
                        f"{upstream.url}/completion", json=body, headers=upstream.headers
                    )
                    break
                except httpx.RemoteProtocolError as err:  # a kept-alive connection closed by then
                    if attempt == 2 or not stale(err):
                        raise
        finally:
            upstreams.release(upstream)
        if reply.status_code != 200:
            raise RuntimeError(
                f"llama-server answered HTTP {reply.status_code}: {reply.text[:300]!r}"
            )
        data = reply.json()
        return [int(t) for t in data.get("tokens") or []], data.get("stop_type") == "eos"

    def close(self) -> None:
        """Stop the llama-server this answerer started."""
        self._http.close()
        self.engine.close()


def open_answerer(
    session: ModelSession,
    choice: str,
    adapters: list[str],
    batch_size: int,
    factory: Callable | None = None,
):
    """The engine that answers an evaluation of ``adapters`` (see the module docstring).

    Args:
        session: the loaded PyTorch session of the adapters' base model.
        choice: ``auto``, ``llama.cpp`` or ``pytorch``.
        adapters: the adapters to answer with (their LoRA GGUFs are converted now).
        batch_size: prompts per PyTorch ``generate`` call.
        factory: builds the llama.cpp engine (default
            :func:`serve.llama_server.factory.make_llama_engine`); called with the session and
            ``adapters=``.

    Returns:
        A :class:`LlamaAnswerer` or :class:`TorchAnswerer` (``note`` says why PyTorch answered
        when ``auto`` fell back); the caller closes it.

    Raises:
        ValueError: an unknown choice, or ``llama.cpp`` where it cannot answer (with why).
    """
    if choice not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {choice!r}")
    if choice == "pytorch":
        return TorchAnswerer(session, batch_size)
    try:
        return LlamaAnswerer(_llama_engine(session, adapters, factory))
    except Exception as err:  # any failure to start or convert: auto answers with PyTorch instead
        reason = str(err) if isinstance(err, LlamaUnavailable) else f"{type(err).__name__}: {err}"
        reason = " ".join(reason.split())[:400]
        if choice == "llama.cpp":
            raise ValueError(f"llama.cpp cannot answer this evaluation: {reason}") from None
        return TorchAnswerer(
            session, batch_size, note=f"PyTorch answered: llama.cpp could not ({reason})"
        )


def _llama_engine(session: ModelSession, adapters: list[str], factory: Callable | None):
    from core.llama_cpp.binaries import missing_reason, server_binary

    if not str(session.device).startswith("cpu"):
        raise LlamaUnavailable("the session is on a GPU, where PyTorch serves")
    if server_binary() is None:
        raise LlamaUnavailable(missing_reason())
    if factory is None:
        from serve.llama_server.factory import make_llama_engine

        factory = make_llama_engine
    engine = factory(session, adapters=list(adapters))
    try:
        for name in adapters:  # converted (and checked) now, not halfway through the answers
            engine.lora_path(name)
    except BaseException:
        engine.close()
        raise
    return engine
