"""What the API relays to llama-server as it is: tool-calling chats and Prometheus metrics.

A request with ``tools`` goes to llama-server's own ``/v1/chat/completions``: its template
renders the tools and its parser returns ``tool_calls``, which TuneDesk's token-id path cannot.
That endpoint tokenizes the rendered text with control tokens parsed, so the API refuses a
request any of whose texts spells one (``<|im_start|>`` ...) before it comes here (on every
engine path: ``serve.openai_api``), and relays only the checked, normalised body
(:func:`serve.requests.relay_body`), never the raw one.

A relayed answer carries TuneDesk's own id, not llama-server's, and once it has arrived whole
(streamed or not) its message (text and tool calls) is handed to the caller's ``remember``,
so ``/v1/feedback`` takes its id as any answer's.
"""

from __future__ import annotations

import json
import logging

import anyio
import httpx
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from serve.interface.bounds import AnswerBound, answer_bound, timeout_error
from serve.llama_server.engine import refusal, stale

log = logging.getLogger("tunedesk.serve")


async def relay_tools(
    engine,
    body: dict,
    stream: bool,
    model: str,
    adapter: str | None,
    bounded=None,
    answer_id: str | None = None,
    remember=None,
    timed=None,
    bound: AnswerBound | None = None,
):
    """Relay a chat request with tools (``body``: :func:`serve.requests.relay_body`) to the least
    busy upstream holding ``adapter``'s LoRA; the answer comes back as llama-server gave it,
    named as every answer is (``model`` as asked, ``system_fingerprint`` the engine's label,
    ``id`` the ``answer_id`` given).

    ``bounded``: wraps a stream's chunks in the answer's time bounds
    (:func:`serve.streaming.bounded`); None: unbounded. ``remember``: called in a worker thread
    with the whole answer's ``{"content": text, "tool_calls": [{"name", "arguments"}]}`` once
    it has arrived (not for an error, or a stream that ended before its finish). ``timed``:
    wraps a stream's events, given them and a callable saying whether the answer came whole
    (:meth:`serve.version_stats.VersionStats.timed`); a whole answer is the caller's to count.
    ``bound`` (default: the environment's): a whole answer must have come within its
    ``total_s``, a stream's first chunk within its ``idle_s``; past it the upstream request is
    closed (llama-server drops it) and nothing is kept.

    Raises:
        ValueError: the adapter cannot serve.
        AnswerTimeout: past ``bound``, before the answer (or a stream's first chunk) came.
        PromptTooLong: llama-server found the rendered conversation (tools included) longer
            than its slot's context.
        EngineRefused: llama-server refused the request otherwise (a 400).
    """
    bound = bound or answer_bound()
    started = anyio.current_time()
    lora = None if adapter is None else await run_in_threadpool(engine.lora_path, adapter)
    upstream = await run_in_threadpool(engine.upstreams.acquire, lora, engine.known_loras)
    body = {**body, "lora": upstream.lora_scales(lora)}
    # llama-server sends a stream's headers with its first token, a whole answer's with all of
    # it: the idle clock bounds the first, the whole-answer cap the second (httpx's own read
    # timeout is 600 s, whatever the bound says)
    first_by = started + (min(bound.idle_s, bound.total_s) if stream else bound.total_s)
    try:
        with anyio.CancelScope(deadline=first_by) as waiting:  # cancelled: the request closes
            response = await _post(
                engine.async_client(),
                f"{upstream.url}/v1/chat/completions",
                body,
                upstream.headers,
            )
        if waiting.cancelled_caught:
            raise timeout_error(bound, idle=stream)
    except Exception:
        engine.upstreams.release(upstream)
        raise
    if not stream or response.status_code != 200:
        try:
            with anyio.CancelScope(deadline=started + bound.total_s) as reading:
                payload = await response.aread()
        finally:
            await response.aclose()
            engine.upstreams.release(upstream)
        if reading.cancelled_caught:
            raise timeout_error(bound, idle=False)
        if response.status_code == 400:  # the asker's, said as the token-id path says it
            raise refusal(400, payload, body)
        data, status = _decoded(payload, response.status_code)
        if status == 200 and isinstance(data, dict):
            data.update(model=model, system_fingerprint=engine.label)
            if answer_id is not None:
                data["id"] = answer_id
            if remember is not None:  # the answer is made: a failure costs its vote only
                try:
                    await run_in_threadpool(remember, whole_message(data))
                except Exception:
                    log.exception("a relayed answer could not be kept for /v1/feedback")
        return JSONResponse(data, status_code=status)

    async def chunks():
        try:
            async for part in response.aiter_raw():
                yield part
        finally:
            await response.aclose()  # a hang-up closes the upstream stream: llama-server stops
            engine.upstreams.release(upstream)

    parts = chunks() if bounded is None else bounded(chunks())
    answer = StreamedAnswer()
    events = renamed(parts, model, engine.label, answer_id, answer)
    if remember is not None:
        events = _remembered(events, answer, remember)
    if timed is not None:
        events = timed(events, lambda: answer.finished)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class StreamedAnswer:
    """A relayed stream's message as its chunks pass: text, and tool calls merged by index."""

    def __init__(self):
        self.content: list[str] = []
        self.calls: dict[int, dict] = {}
        self.finished = False  # a finish_reason came: the answer is whole

    def add(self, chunk: dict) -> None:
        for choice in chunk.get("choices") or []:
            delta = (choice.get("delta") if isinstance(choice, dict) else None) or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                kept = self.calls.setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                for key in kept:
                    kept[key] += str((call.get("function") or {}).get(key) or "")
            self.finished = self.finished or bool(choice.get("finish_reason"))

    def message(self) -> dict:
        return {
            "content": "".join(self.content),
            "tool_calls": [self.calls[i] for i in sorted(self.calls)],
        }


def whole_message(data: dict) -> dict:
    """A whole (not streamed) answer's message, in :meth:`StreamedAnswer.message`'s shape."""
    choices = data.get("choices") or [{}]
    message = (choices[0] if isinstance(choices[0], dict) else {}).get("message") or {}
    calls = [c.get("function") or {} for c in message.get("tool_calls") or []]
    return {
        "content": message.get("content") if isinstance(message.get("content"), str) else "",
        "tool_calls": [
            {"name": str(c.get("name") or ""), "arguments": str(c.get("arguments") or "")}
            for c in calls
        ],
    }


async def _remembered(events, answer: StreamedAnswer, remember):
    """``events`` passed on, the whole answer kept before the one that ends the stream
    (``[DONE]``, where a client's loop ends), so a vote sent then finds it."""
    kept = False
    async for event in events:
        if not kept and answer.finished and b"data: [DONE]" in event:
            kept = await _keep(answer, remember)
        yield event
    if not kept and answer.finished:  # a stream that ended without [DONE]
        await _keep(answer, remember)


async def _keep(answer: StreamedAnswer, remember) -> bool:
    try:
        await run_in_threadpool(remember, answer.message())
    except Exception:  # the client has the answer: it still gets the rest of the stream
        log.exception("a relayed answer could not be kept for /v1/feedback")
    return True


async def renamed(
    parts,
    model: str,
    label: str,
    answer_id: str | None = None,
    answer: StreamedAnswer | None = None,
):
    """llama-server's server-sent events with each chunk's ``model`` and ``system_fingerprint``
    as every answer names them (llama-server's own are its GGUF file's path and build), its
    ``id`` the ``answer_id`` given; each chunk is added to ``answer`` when given."""
    rest = b""
    named = {"model": model, "system_fingerprint": label}
    if answer_id is not None:
        named["id"] = answer_id
    async for part in parts:
        *lines, rest = (rest + part).split(b"\n")
        if lines:
            yield b"".join(_renamed_line(line, named, answer) + b"\n" for line in lines)
    if rest:
        yield _renamed_line(rest, named, answer)


def _renamed_line(line: bytes, named: dict, answer: StreamedAnswer | None) -> bytes:
    if not line.startswith(b"data: {"):
        return line
    try:
        chunk = json.loads(line[6:])
    except ValueError:
        return line
    if isinstance(chunk, dict) and "choices" in chunk:
        chunk.update(named)
        if answer is not None:
            answer.add(chunk)
    return b"data: " + json.dumps(chunk).encode()


async def _post(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> httpx.Response:
    """``body`` posted to ``url`` with ``headers`` (the upstream's key), the response open for
    streaming; sent again once on a fresh connection when a reused one had been closed by
    llama-server before it answered."""
    try:
        return await client.send(
            client.build_request("POST", url, json=body, headers=headers), stream=True
        )
    except httpx.RemoteProtocolError as err:
        if not stale(err):
            raise
    return await client.send(
        client.build_request("POST", url, json=body, headers=headers), stream=True
    )


def _decoded(payload: bytes, status: int) -> tuple:
    """(llama-server's answer decoded, the status to send): what is not JSON is a 502 in
    OpenAI's error shape."""
    try:
        return json.loads(payload), status
    except ValueError:
        error = {
            "message": payload[:300].decode(errors="replace"),
            "type": "server_error",
            "param": None,
            "code": None,
        }
        return {"error": error}, 502 if status == 200 else status


def upstream_metrics(engine, timeout: float = 5.0) -> str:
    """Every upstream's ``/metrics``, each sample labelled with ``upstream="<url>"``."""
    seen, lines = set(), []
    for upstream in engine.upstreams.all:
        try:
            text = httpx.get(
                f"{upstream.url}/metrics", headers=upstream.headers, timeout=timeout
            ).text
        except httpx.HTTPError as err:
            lines.append(f"# upstream {upstream.url} did not answer: {type(err).__name__}")
            continue
        for line in text.splitlines():
            if line.startswith("#"):
                if line not in seen:
                    seen.add(line)
                    lines.append(line)
            elif line.strip():
                name, _, value = line.partition(" ")
                lines.append(f'{name}{{upstream="{upstream.url}"}} {value}')
    return "\n".join(lines) + "\n"
