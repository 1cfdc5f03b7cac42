"""The clients benchmark through the real HTTP API (``python -m bench serving --clients ...``):
the OpenAI-compatible routes served by uvicorn on a local port, every client the official
``openai`` package streaming its answer, one run per serving engine.

Each engine gets a fresh session and server, so PyTorch's batching scheduler and llama.cpp's
single stream are measured the same way, in the same run, on the same adapters and questions.
By default the server is its own process (``python -m serve``), as in use: with the
16 client threads in the server's process, their SSE parsing took the interpreter lock from
the decode loop and made every step slower (``--server thread`` measures that way).
Requests carry ``min_tokens`` (vLLM's extension, which the API accepts) so every answer is
exactly ``tokens`` long.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.clients import Submit, bench_clients
from inference.generate import GenerationSettings


def openai_submit(base_url: str, extra: dict | None = None) -> Submit:
    """A submit callable that streams one chat completion through the ``openai`` client; its
    ``engines`` attribute counts the answers per engine that gave them (``system_fingerprint``),
    ``prompt`` the prompt tokens (``"read"``) and those the engine restored from its prompt
    cache (``"cached"``, where it says) over every answer. ``extra``: more request fields (e.g.
    ``knowledge``)."""
    import collections

    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=900)
    seen: collections.Counter = collections.Counter()
    prompt: collections.Counter = collections.Counter()

    def submit(
        messages: list[dict], adapter: str | None, settings: GenerationSettings
    ) -> Iterator[str]:
        stream = client.chat.completions.create(
            model=adapter or "base",
            messages=messages,
            stream=True,
            temperature=0,
            max_tokens=settings.max_new_tokens,
            stream_options={"include_usage": True},
            extra_body={"min_tokens": settings.min_new_tokens, **(extra or {})},
        )
        engine = None
        for chunk in stream:
            engine = engine or chunk.system_fingerprint
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                prompt["read"] += chunk.usage.prompt_tokens
                prompt["cached"] += (details.cached_tokens or 0) if details else 0
        seen[engine or "unknown"] += 1

    submit.engines, submit.prompt = seen, prompt
    return submit


def measure_api(
    model_path,
    shelf,
    engine: str,
    dtype: str,
    clients: list[int],
    adapters: list,
    tokens: int,
    log: Callable[[str], None] | None = None,
    check: int = 16,
    server: str = "process",
) -> tuple[str, list[dict]]:
    """One engine (``pytorch``, ``llama.cpp`` or ``auto``) behind a fresh API server:
    (label of what answered, one row per client count). ``server``: ``process`` (its own
    process, as deployed) or ``thread`` (in this process)."""
    if server == "process":
        with served_in_child(model_path, Path(shelf).parent, engine, dtype) as url:
            rows = bench_clients(
                openai_submit(url), clients, adapters, tokens, log=log, check=check
            )
            return answered_by(url), rows
    from fastapi import FastAPI

    from bench.local_server import serving
    from inference.session import ModelSession
    from serve.engines import Engines, label
    from serve.openai_api import OpenAIServer

    session = ModelSession(str(model_path), dtype=dtype, adapters_dir=shelf)
    engines = Engines(session, engine)
    engines.prepare(wait=True)
    if engine == "llama.cpp" and engines.llama() is None:
        raise RuntimeError(f"llama.cpp cannot serve here: {engines.llama_error}")
    app = FastAPI()
    app.include_router(OpenAIServer(engines).router())
    with serving(app) as url:
        rows = bench_clients(openai_submit(url), clients, adapters, tokens, log=log, check=check)
    answered = label(engines.pick()) if engine != "auto" else f"auto ({engines.describe()})"
    return answered, rows


@contextmanager
def served_in_child(
    model_path,
    home: Path,
    engine: str,
    dtype: str,
    start_timeout: float = 600.0,
    children: list | None = None,
):
    """``python -m serve`` on a free port in a child process; yields its base URL (``children``,
    when given, gets the child's ``Popen``: a test signals it).

    Raises:
        RuntimeError: the server exited or did not answer within ``start_timeout`` seconds
            (with the end of its log).
    """
    import urllib.request

    from bench.local_server import free_port

    port = free_port()
    log_path = Path(home) / f"serve-{engine}-{dtype}-{port}.log"
    env = {**os.environ, "TUNEDESK_DTYPE": dtype, "TUNEDESK_HOME": str(home)}
    argv = [
        sys.executable,
        "-m",
        "serve",
        "--port",
        str(port),
        "--model",
        str(model_path),
        "--engine",
        engine,
    ]
    root = Path(__file__).resolve().parents[1]
    with open(log_path, "wb") as log:
        child = subprocess.Popen(argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    if children is not None:
        children.append(child)
    url, deadline = f"http://127.0.0.1:{port}", time.time() + start_timeout
    try:
        while True:
            if child.poll() is not None or time.time() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the API server for {engine} {dtype} did not start:\n{tail}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def answered_by(url: str) -> str:
    """The engine label the server puts in ``system_fingerprint`` (one 1-token answer)."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=300)
    got = client.chat.completions.create(
        model="base", messages=[{"role": "user", "content": "hi"}], max_tokens=1, temperature=0
    )
    return got.system_fingerprint or "unknown engine"
