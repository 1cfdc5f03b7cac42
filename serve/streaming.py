"""Streaming an answer: the text deltas of either engine and the server-sent events that carry
them in OpenAI's chunk format (a role chunk, content chunks, the finish chunk,
usage, ``[DONE]``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass

import anyio
from starlette.concurrency import run_in_threadpool

from inference.generate import PromptTooLong
from serve.interface.bounds import (
    AnswerBound,
    AnswerTimeout,
    EngineStopping,
    answer_bound,
    timeout_error,
)
from serve.interface.ticket import EngineRefused
from serve.requests import ChatRequest

_END = object()
log = logging.getLogger("tunedesk.serve")
STOP_POLL_S = 0.25  # how often a relayed answer looks whether the server is stopping


def new_answer_id() -> str:
    """A new answer's id, which ``/v1/feedback`` takes back."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def response_head(chat: ChatRequest, ticket) -> dict:
    """Fields every response and chunk share; ``system_fingerprint`` names the engine."""
    return {
        "id": new_answer_id(),
        "created": int(time.time()),
        "model": chat.model,
        "system_fingerprint": getattr(ticket, "engine", None),
    }


def usage(ticket) -> dict:
    """OpenAI's token counts; ``prompt_tokens_details.cached_tokens`` (prompt tokens the engine
    restored from its prompt cache instead of computing) where the engine says (llama.cpp)."""
    counts = {
        "prompt_tokens": ticket.prompt_tokens,
        "completion_tokens": ticket.completion_tokens,
        "total_tokens": ticket.prompt_tokens + ticket.completion_tokens,
    }
    cached = getattr(ticket, "cached_tokens", None)
    if cached is not None:
        counts["prompt_tokens_details"] = {"cached_tokens": cached}
    return counts


@dataclass
class Tally:
    """What a relayed llama.cpp answer ends with (a Ticket carries the same for the others)."""

    prompt_tokens: int
    engine: str
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached_tokens: int | None = None


async def llama_deltas(
    engine,
    request,
    tally: Tally,
    release,
    bound: AnswerBound | None = None,
    stopping: threading.Event | None = None,
):
    """The text of a llama.cpp answer as llama-server streams it; ``tally`` gets its end,
    ``release()`` runs when it has ended. Within ``bound`` (default: the environment's) and
    until ``stopping`` is set, as :func:`bounded`."""
    try:
        async for event in bounded(engine.stream(request), bound or answer_bound(), stopping):
            if event.text:
                yield event.text
            if event.finish is not None:
                tally.finish_reason, tally.completion_tokens = event.finish, event.completion_tokens
                tally.cached_tokens = event.cached_tokens
            else:
                tally.completion_tokens += event.tokens
    finally:
        release()


async def bounded(events, bound: AnswerBound, stopping: threading.Event | None = None):
    """``events`` (an async iterator) as they come, while each comes within ``bound.idle_s`` of
    the last and all within ``bound.total_s``; past either, or once ``stopping`` is set, the
    pending read is cancelled (closing the upstream request) and ``AnswerTimeout`` or
    ``EngineStopping`` raised.

    Each read runs in the caller's own task, inside a cancel scope whose deadline is the nearer
    clock, so a client that hangs up cancels the read itself and the upstream request closes
    at once (a read in a task of its own is cancelled by the server's scope again while it
    closes, and leaves the upstream connection open and decoding)."""
    source = events.__aiter__()
    started = progress = anyio.current_time()
    loop = asyncio.get_running_loop()
    try:
        while True:
            due = min(progress + bound.idle_s, started + bound.total_s)
            with anyio.CancelScope(deadline=due) as scope:
                unwatch = _watch(loop, scope, stopping)
                try:
                    item = await source.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    unwatch()
            if scope.cancelled_caught:
                if stopping is not None and stopping.is_set():
                    raise EngineStopping("the server is stopping; this answer was not finished")
                raise timeout_error(bound, idle=anyio.current_time() < started + bound.total_s)
            progress = anyio.current_time()
            yield item
    finally:
        closing = getattr(source, "aclose", None)
        if closing is not None:
            with contextlib.suppress(Exception):
                await closing()


def _watch(loop: asyncio.AbstractEventLoop, scope, stopping: threading.Event | None):
    """Cancel ``scope`` once ``stopping`` is set, looking now and 4 times a second; returns the
    function that ends the watch."""
    handles: list[asyncio.TimerHandle] = []

    def look() -> None:
        if stopping.is_set():
            scope.cancel()
        else:
            handles.append(loop.call_later(STOP_POLL_S, look))

    if stopping is not None:
        look()
    return lambda: handles and handles[-1].cancel()


async def ticket_deltas(ticket):
    """A ticket's text, read in a worker thread; leaving early cancels the answer."""
    deltas = iter(ticket)
    try:
        while (delta := await run_in_threadpool(next, deltas, _END)) is not _END:
            yield delta
    finally:
        ticket.cancel()  # no-op once done; stops decoding when the client went away


def stream_error(err: Exception) -> dict:
    """OpenAI's error object for an answer that failed after its headers were sent."""
    if isinstance(err, AnswerTimeout):
        return {
            "error": {
                "message": str(err),
                "type": "timeout",
                "param": None,
                "code": "answer_timeout",
            }
        }
    if isinstance(err, PromptTooLong):
        return {
            "error": {
                "message": str(err),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    if isinstance(err, EngineRefused):
        return {
            "error": {
                "message": str(err),
                "type": "invalid_request_error",
                "param": err.param,
                "code": None,
            }
        }
    if isinstance(err, EngineStopping):
        return {
            "error": {
                "message": str(err),
                "type": "server_error",
                "param": None,
                "code": "server_stopping",
            }
        }
    return {
        "error": {
            "message": f"the answer failed: {err}",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }


async def sse_events(
    deltas, answer, head: dict, chat: ChatRequest, remember=None, final: dict | None = None
):
    """Server-sent events: a role chunk, content chunks, the finish chunk, usage, [DONE].

    ``final``: fields the finish chunk carries beside OpenAI's (``tunedesk_grounding``,
    ``tunedesk_check``: what a whole answer carries in its body).

    An async generator, so a client that hangs up cancels it at once, and with it the
    answer's source (the engine stops decoding at its next step). A content chunk is the
    answer's fixed JSON around the delta's: one ``json.dumps`` of the text per token."""

    def chunk(delta: dict, finish=None, **extra) -> str:
        body = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    before, after = chunk({"content": "\x00"}).split(json.dumps("\x00"))
    parts, whole = [], False
    try:
        yield chunk({"role": "assistant", "content": ""})
        async for delta in deltas:
            parts.append(delta)
            yield before + json.dumps(delta) + after
        yield chunk({}, answer.finish_reason, **(final or {}))
        if chat.include_usage:
            usage_chunk = {
                **head,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": usage(answer),
            }
            yield f"data: {json.dumps(usage_chunk)}\n\n"
        whole = True
    except Exception as err:  # headers are sent: the error goes in the stream, as OpenAI does
        yield f"data: {json.dumps(stream_error(err))}\n\n"
    if whole and remember is not None:  # a whole answer can be rated: kept before [DONE], where
        # a client's stream ends (the openai client's loop), so a vote sent then finds it
        try:
            await run_in_threadpool(remember, "".join(parts))
        except Exception:  # the client has the answer: it still gets its [DONE]
            log.exception("a streamed answer could not be kept for /v1/feedback")
    yield "data: [DONE]\n\n"
