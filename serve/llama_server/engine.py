"""llama-server as a serving engine behind Chat, Compare and ``/v1``.

Each answer is one streamed ``POST /completion`` to an upstream llama-server. The prompt is
sent as token ids, rendered and tokenized by TuneDesk exactly as the PyTorch engine does
(:func:`inference.generate.encode`): text a user typed is text, even ``<|im_start|>``, and both
engines read the same tokens. The adapter is a LoRA id with scale 1 for this request only;
every other LoRA stays at scale 0. Stop strings are llama-server's own. Closing the stream
(the reader went away) makes llama-server drop the request at its next step.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from starlette.concurrency import run_in_threadpool

from core.thinking import ThinkingFilter
from inference.generate import (
    GenerationSettings,
    PromptTooLong,
    context_limit,
    encode,
    with_system,
)
from inference.session import ModelSession, is_base
from serve.interface.bounds import answer_bound, timeout_error
from serve.interface.ticket import EngineRefused, ServerBusy, Ticket
from serve.llama_server.upstreams import Upstream, Upstreams

FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
# llama-server (cpp-httplib) closes a connection idle for 5 s; one reused just then fails with
# "Server disconnected without sending a response" (1 answer in 4 in the gateway bench). Idle
# connections are dropped here sooner, and a request that failed so before any answer goes
# again once on a fresh connection.
KEEPALIVE_S = 2.0


class LlamaServerEngine:
    """Answers through llama-server upstreams (:class:`Upstreams`).

    Args:
        session: the PyTorch session whose tokenizer renders prompts (and whose shelf checks
            adapters).
        upstreams: where requests go.
        lora_file: an adapter name -> its LoRA GGUF (converted when needed); raises ValueError
            for an unknown or unusable adapter.
        ctx_per_slot: tokens of prompt plus answer one request may hold.
        max_inflight: requests in flight (decoding or waiting upstream) before ServerBusy.
        label: what answers are labelled with, e.g. ``llama.cpp q8_0``.
    """

    name = "llama.cpp"

    def __init__(
        self,
        session: ModelSession,
        upstreams: Upstreams,
        lora_file: Callable[[str], Path],
        *,
        ctx_per_slot: int,
        max_inflight: int = 80,
        label: str = "llama.cpp",
    ):
        self.session, self.upstreams, self.lora_file = session, upstreams, lora_file
        self.ctx_per_slot, self.max_inflight, self.label = ctx_per_slot, max_inflight, label
        self.note = ""  # a sentence for the page, e.g. why llama.cpp's repacking is off here
        self._known: dict[str, Path] = {}  # adapter -> the LoRA file it was last served from
        self._inflight = 0
        self._lock = threading.Lock()
        limits = httpx.Limits(
            max_connections=max_inflight + 8,
            max_keepalive_connections=32,
            keepalive_expiry=KEEPALIVE_S,
        )
        self._http = httpx.Client(limits=limits, timeout=httpx.Timeout(600.0, connect=10.0))
        # One async client per event loop: a client's pooled connections belong to the loop that
        # opened them, and reused from another (a server restarted in the same process) they fail.
        self._async_http: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def prepare(
        self,
        messages: list[dict],
        adapter: str | None,
        settings: GenerationSettings | None = None,
        stop: list[str] | None = None,
        json_schema: dict | None = None,
    ) -> Request:
        """Check one request (:meth:`stream` then counts it in flight while it runs).
        ``json_schema``: the answer is JSON following it (grammar-constrained sampling).

        Raises:
            ValueError: bad settings or messages, a prompt too long, an unusable adapter.
            ServerBusy: ``max_inflight`` requests are already in flight.
        """
        settings = settings or GenerationSettings()
        settings.check()
        name = None if is_base(adapter) else adapter
        lora = None if name is None else self._lora(name)
        prompt = encode(self.session, [with_system(messages, settings)])["input_ids"][0].tolist()
        slot = self.slot_tokens()
        if len(prompt) + 1 >= slot:  # room for one answer token at least
            raise PromptTooLong(len(prompt), slot - 2, "this server")
        body = completion_body(prompt, settings, stop, slot)
        if json_schema is not None:
            body["json_schema"] = json_schema
        if (
            self._inflight >= self.max_inflight
        ):  # a bound, not an exact count: checked, then counted
            raise ServerBusy(f"{self._inflight} requests are in flight; try again shortly")
        return Request("base" if name is None else name, lora, len(prompt), body)

    def submit(
        self,
        messages: list[dict],
        adapter: str | None,
        settings: GenerationSettings | None = None,
        stop: list[str] | None = None,
        json_schema: dict | None = None,
    ) -> Ticket:
        """Queue one answer; returns at once with its :class:`Ticket` (see :meth:`prepare`)."""
        request = self.prepare(messages, adapter, settings, stop, json_schema)
        ticket = Ticket(request.adapter, request.prompt_tokens, lambda _: 0)
        threading.Thread(
            target=self._relay, args=(ticket, request), daemon=True, name="tunedesk-llama-relay"
        ).start()
        return ticket

    async def stream(self, request: Request) -> AsyncIterator[Event]:
        """The answer's events as llama-server sends them, without a thread or a queue between
        (the API relays them straight); the events that arrived together come as one (one write
        to the client for them when the relay falls behind). Leaving early closes the upstream
        stream: llama-server drops the request at its next step."""
        upstream = None
        self._started()
        try:
            upstream = self.upstreams.ready(request.lora) or await run_in_threadpool(
                self.upstreams.acquire, request.lora, self.known_loras
            )
            body = {**request.body, "lora": upstream.lora_scales(request.lora)}
            for attempt in (1, 2):
                try:
                    async with self.async_client().stream(
                        "POST",
                        f"{upstream.url}/completion",
                        json=body,
                        headers=upstream.headers,
                        timeout=read_bound(),
                    ) as response:
                        if response.status_code != 200:
                            raise refusal(response.status_code, await response.aread(), body)
                        rest = b""
                        async for part in response.aiter_raw():
                            *lines, rest = (rest + part).split(b"\n")
                            events = [
                                parse_event(line[6:])
                                for line in lines
                                if line.startswith(b"data: ")
                            ]
                            if events:
                                yield merged(events)
                        if rest.startswith(b"data: "):
                            yield parse_event(rest[6:])
                    break
                except httpx.RemoteProtocolError as err:
                    if attempt == 2 or not stale(err):
                        raise
        except (
            httpx.ReadTimeout
        ) as err:  # the read waited the idle bound: the API's 504, whichever clock ran out first
            raise timeout_error(answer_bound(), idle=True) from err
        finally:
            if upstream is not None:
                self.upstreams.release(upstream)
            self._finished()

    def slot_tokens(self) -> int:
        """Tokens of prompt plus answer one request may hold: ``ctx_per_slot``, or the model's
        positions where it reads fewer (llama-server cuts its slots' context to them)."""
        positions = context_limit(self.session)
        return min(self.ctx_per_slot, positions) if positions else self.ctx_per_slot

    def lora_path(self, name: str) -> Path:
        """Adapter ``name``'s LoRA file, after the checks every engine runs.

        Raises:
            ValueError: an unknown or unusable adapter.
        """
        return self._lora(name)

    def control_tokens(self) -> list[str]:
        """The spellings of the tokenizer's control tokens (``<|im_start|>`` ...)."""
        tokenizer = self.session.tokenizer
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        return sorted(
            {t.content for t in added.values() if getattr(t, "special", False)}
            | set(tokenizer.all_special_tokens)
        )

    def async_client(self) -> httpx.AsyncClient:
        """The client relays use in the running event loop (made there at first use)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async_http.get(loop)
            if client is None:
                client = self._async_http[loop] = httpx.AsyncClient(
                    timeout=httpx.Timeout(600.0, connect=10.0),
                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
                )
            return client

    def _lora(self, name: str) -> Path:
        path = Path(self.lora_file(name))
        with self._lock:
            self._known[name] = path
        return path

    def known_file(self, name: str) -> Path | None:
        """Adapter ``name``'s LoRA file (converted now if needed), or None if it cannot serve."""
        try:
            return self._lora(name)
        except (ValueError, OSError, RuntimeError):
            return None

    def known_loras(self) -> list[Path]:
        """The LoRA files of adapters served so far whose GGUF files still exist (a new server
        starts with these; an adapter deleted since is refused at its next request anyway)."""
        with self._lock:
            known = dict(self._known)
        return [path for path in known.values() if path.is_file()]

    def _started(self) -> None:
        with self._lock:
            self._inflight += 1

    def _finished(self) -> None:
        with self._lock:
            self._inflight -= 1

    def _relay(self, ticket: Ticket, request: Request) -> None:
        upstream = None
        self._started()
        try:
            upstream = self.upstreams.acquire(request.lora, self.known_loras)
            body = {**request.body, "lora": upstream.lora_scales(request.lora)}
            ticket.finish(self._stream(upstream, ticket, body))
        except (
            httpx.ReadTimeout
        ):  # the read waited the idle bound: the same error as the ticket's own clock
            ticket.fail(timeout_error(answer_bound(), idle=True))
        except Exception as err:  # the reader gets the error from the ticket
            ticket.fail(
                err
                if isinstance(err, ValueError | ServerBusy)
                else RuntimeError(f"llama-server failed: {type(err).__name__}: {err}")
            )
        finally:
            if upstream is not None:
                self.upstreams.release(upstream)
            self._finished()

    def _stream(self, upstream: Upstream, ticket: Ticket, body: dict) -> str:
        try:
            return self._stream_once(upstream, ticket, body)
        except httpx.RemoteProtocolError as err:
            if not stale(err):
                raise
            return self._stream_once(upstream, ticket, body)

    def _stream_once(self, upstream: Upstream, ticket: Ticket, body: dict) -> str:
        with self._http.stream(
            "POST",
            f"{upstream.url}/completion",
            json=body,
            headers=upstream.headers,
            timeout=read_bound(),
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
            shown = ThinkingFilter()  # a reasoning block is no part of the answer
            for line in response.iter_lines():
                if ticket.cancelled:
                    return "cancelled"  # leaving the block closes the stream: llama-server stops
                if not line.startswith("data: "):
                    continue
                event = parse_event(line[6:])
                _put(ticket, shown.feed(event.text))
                if event.finish is not None:
                    _put(ticket, shown.finish())
                    ticket.completion_tokens = event.completion_tokens
                    ticket.cached_tokens = event.cached_tokens
                    return event.finish
                ticket.completion_tokens += event.tokens
            _put(ticket, shown.finish())
        return "length"

    def close(self) -> None:
        self.upstreams.close()
        self._http.close()


def _put(ticket: Ticket, text: str) -> None:
    if text:
        ticket.put_text(text)


@dataclass
class Request:
    """One checked request, counted in flight: who answers, the prompt's size, the body."""

    adapter: str  # the adapter's name, or "base"
    lora: Path | None
    prompt_tokens: int
    body: dict


@dataclass
class Event:
    """One streamed piece of an answer."""

    text: str
    tokens: int  # tokens this piece holds
    finish: str | None = None  # "stop" / "length" on the last event
    completion_tokens: int = 0  # on the last event: the answer's tokens, end-of-turn excluded
    cached_tokens: int = 0  # on the last event: prompt tokens restored, not computed


def read_bound() -> httpx.Timeout:
    """An answer's reads wait at most its idle bound (``serve/interface/bounds.py``): a
    llama-server that stops sending frees the relay then, not after ten minutes."""
    return httpx.Timeout(600.0, connect=10.0, read=answer_bound().idle_s)


def stale(err: Exception) -> bool:
    """Whether a request failed on a reused connection the server had closed, before any
    answer (so it may go again)."""
    return "without sending a response" in str(err)


def merged(events: list[Event]) -> Event:
    """Events that arrived together as one (the last one's finish, if any)."""
    if len(events) == 1:
        return events[0]
    last = events[-1]
    return Event(
        "".join(e.text for e in events),
        sum(e.tokens for e in events),
        last.finish,
        last.completion_tokens,
        last.cached_tokens,
    )


def parse_event(data: str | bytes) -> Event:
    """A ``/completion`` stream event (the JSON after ``data: ``) as an :class:`Event`."""
    event = json.loads(data)
    if event.get("stop"):
        return Event(
            event.get("content", ""),
            0,
            FINISH.get(event.get("stop_type"), "stop"),
            int(event.get("tokens_predicted", 0)),
            int((event.get("timings") or {}).get("cache_n", 0)),
        )
    return Event(event.get("content", ""), len(event.get("tokens") or ()) or 1)


def completion_body(
    prompt: list[int], settings: GenerationSettings, stop: list[str] | None, ctx_per_slot: int
) -> dict:
    """llama-server's ``/completion`` request for these settings (greedy when temperature 0)."""
    # Greedy is top-k 1: the same token, without sorting the 49k-token vocabulary at every step
    # (top_k 0 with top_p 1 did, and cost a tenth of the decoding speed).
    top_k = 1 if settings.greedy else settings.top_k
    body = {
        "prompt": prompt,
        "stream": True,
        "cache_prompt": True,
        "return_tokens": True,
        "n_predict": min(settings.max_new_tokens, ctx_per_slot - len(prompt) - 1),
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "top_k": top_k,
        "min_p": 0.0,
        "repeat_penalty": settings.repetition_penalty,
        "seed": settings.seed,
        "stop": list(stop or []),
    }
    if settings.min_new_tokens >= settings.max_new_tokens:
        body["ignore_eos"] = True  # benchmarks: always the full length
    return body


def refusal(status: int, payload: bytes, body: dict) -> Exception:
    """The error for llama-server's non-200 answer to ``body`` (a ``/completion`` body, or a
    relayed chat's): :class:`PromptTooLong` for a prompt past its slot's context,
    :class:`EngineRefused` for another 400 (the request as asked; ``response_format`` named
    when it asked for JSON), else a ``RuntimeError`` naming the status."""
    if status != 400:
        return RuntimeError(f"llama-server answered HTTP {status}: {payload[:300]!r}")
    try:
        error = json.loads(payload)["error"]
        said = error["message"]
    except (ValueError, KeyError, TypeError):
        error, said = None, payload[:300].decode(errors="replace")
    too_long = context_exceeded(error)
    if too_long is not None:
        return too_long
    return EngineRefused(
        f"llama-server refused the request: {str(said)[:300]}",
        "response_format" if "json_schema" in body or _json_format(body) else None,
    )


def context_exceeded(error) -> PromptTooLong | None:
    """llama-server's error object for a prompt of as many tokens as its slot's context or more
    (``exceed_context_size_error``, with ``n_prompt_tokens`` and ``n_ctx``) as TuneDesk's own
    refusal of it; None for any other error."""
    if not isinstance(error, dict) or error.get("type") != "exceed_context_size_error":
        return None
    tokens, n_ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
    if not (isinstance(tokens, int) and isinstance(n_ctx, int)):
        return None
    return PromptTooLong(tokens, n_ctx - 1, "this server")


def _json_format(body: dict) -> bool:
    """Whether a relayed chat's body asks for a JSON answer (its ``response_format``)."""
    kind = body.get("response_format")
    return isinstance(kind, dict) and kind.get("type") in ("json_object", "json_schema")
