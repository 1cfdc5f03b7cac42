"""Streaming an answer: the text deltas of either engine and the server-sent events that carry
them in OpenAI's chunk format (a role chunk, content chunks, the finish chunk, usage, ``[DONE]``)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from serve.requests import ChatRequest

_END = object()


def response_head(chat: ChatRequest, ticket) -> dict:
    """Fields every response and chunk share; ``system_fingerprint`` names the engine."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": chat.model,
            "system_fingerprint": getattr(ticket, "engine", None)}


def usage(ticket) -> dict:
    return {"prompt_tokens": ticket.prompt_tokens, "completion_tokens": ticket.completion_tokens,
            "total_tokens": ticket.prompt_tokens + ticket.completion_tokens}


@dataclass
class Tally:
    """What a relayed llama.cpp answer ends with (a Ticket carries the same for the others)."""

    prompt_tokens: int
    engine: str
    completion_tokens: int = 0
    finish_reason: str | None = None


async def llama_deltas(engine, request, tally: Tally, release):
    """The text of a llama.cpp answer as llama-server streams it; ``tally`` gets its end,
    ``release()`` runs when it has ended."""
    try:
        async for event in engine.stream(request):
            if event.text:
                yield event.text
            if event.finish is not None:
                tally.finish_reason, tally.completion_tokens = event.finish, event.completion_tokens
            else:
                tally.completion_tokens += event.tokens
    finally:
        release()


async def ticket_deltas(ticket):
    """A ticket's text, read in a worker thread; leaving early cancels the answer."""
    deltas = iter(ticket)
    try:
        while (delta := await run_in_threadpool(next, deltas, _END)) is not _END:
            yield delta
    finally:
        ticket.cancel()  # no-op once done; stops decoding when the client went away


async def sse_events(deltas, answer, head: dict, chat: ChatRequest, remember=None):
    """Server-sent events: a role chunk, content chunks, the finish chunk, usage, [DONE].

    An async generator, so a client that hangs up cancels it at once, and with it the
    answer's source (the engine stops decoding at its next step). A content chunk is the
    answer's fixed JSON around the delta's: one ``json.dumps`` of the text per token."""

    def chunk(delta: dict, finish=None, **extra) -> str:
        body = {**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return f"data: {json.dumps(body)}\n\n"

    before, after = chunk({"content": "\x00"}).split(json.dumps("\x00"))
    parts, whole = [], False
    try:
        yield chunk({"role": "assistant", "content": ""})
        async for delta in deltas:
            parts.append(delta)
            yield before + json.dumps(delta) + after
        yield chunk({}, answer.finish_reason)
        if chat.include_usage:
            yield f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage(answer)})}\n\n"
        whole = True
    except Exception as err:  # headers are sent: the error goes in the stream, as OpenAI does
        yield f"data: {json.dumps({'error': {'message': f'the answer failed: {err}', 'type': 'server_error', 'param': None, 'code': None}})}\n\n"
    yield "data: [DONE]\n\n"
    if whole and remember is not None:  # a whole answer can be rated; after the client has it
        await run_in_threadpool(remember, "".join(parts))
