"""What the API relays to llama-server as it is: tool-calling chats and Prometheus metrics.

A request with ``tools`` goes to llama-server's own ``/v1/chat/completions``: its template
renders the tools and its parser returns ``tool_calls``, which TuneDesk's token-id path cannot.
That endpoint tokenizes the rendered text with control tokens parsed, so the API refuses a
request any of whose texts spells one (``<|im_start|>`` ...) before it comes here (on every
engine path: ``serve.openai_api``), and relays only the checked, normalised body
(:func:`serve.requests.relay_body`), never the raw one.
"""

from __future__ import annotations

import json

import httpx
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from serve.llama_server.engine import stale


async def relay_tools(
    engine, body: dict, stream: bool, model: str, adapter: str | None, bounded=None
):
    """Relay a chat request with tools (``body``: :func:`serve.requests.relay_body`) to the least
    busy upstream holding ``adapter``'s LoRA; the answer comes back as llama-server gave it,
    named as every answer is (``model`` as asked, ``system_fingerprint`` the engine's label).

    ``bounded``: wraps a stream's chunks in the answer's time bounds
    (:func:`serve.streaming.bounded`); None: unbounded.

    Raises:
        ValueError: the adapter cannot serve.
    """
    lora = None if adapter is None else await run_in_threadpool(engine.lora_path, adapter)
    upstream = await run_in_threadpool(engine.upstreams.acquire, lora, engine.known_loras)
    body = {**body, "lora": upstream.lora_scales(lora)}
    try:
        response = await _post(
            engine.async_client(), f"{upstream.url}/v1/chat/completions", body, upstream.headers
        )
    except Exception:
        engine.upstreams.release(upstream)
        raise
    if not stream or response.status_code != 200:
        try:
            payload = await response.aread()
        finally:
            await response.aclose()
            engine.upstreams.release(upstream)
        return _json_answer(payload, response.status_code, model, engine.label)

    async def chunks():
        try:
            async for part in response.aiter_raw():
                yield part
        finally:
            await response.aclose()  # a hang-up closes the upstream stream: llama-server stops
            engine.upstreams.release(upstream)

    parts = chunks() if bounded is None else bounded(chunks())
    return StreamingResponse(
        renamed(parts, model, engine.label),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def renamed(parts, model: str, label: str):
    """llama-server's server-sent events with each chunk's ``model`` and ``system_fingerprint``
    as every answer names them (llama-server's own are its GGUF file's path and build)."""
    rest = b""
    async for part in parts:
        *lines, rest = (rest + part).split(b"\n")
        if lines:
            yield b"".join(_renamed_line(line, model, label) + b"\n" for line in lines)
    if rest:
        yield _renamed_line(rest, model, label)


def _renamed_line(line: bytes, model: str, label: str) -> bytes:
    if not line.startswith(b"data: {"):
        return line
    try:
        chunk = json.loads(line[6:])
    except ValueError:
        return line
    if isinstance(chunk, dict) and "choices" in chunk:
        chunk.update(model=model, system_fingerprint=label)
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


def _json_answer(payload: bytes, status: int, model: str, label: str) -> JSONResponse:
    try:
        data = json.loads(payload)
    except ValueError:
        data = {
            "error": {
                "message": payload[:300].decode(errors="replace"),
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
        status = 502 if status == 200 else status
    if status == 200 and isinstance(data, dict):
        data.update(model=model, system_fingerprint=label)
    return JSONResponse(data, status_code=status)


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
