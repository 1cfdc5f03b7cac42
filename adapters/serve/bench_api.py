"""The clients benchmark through the real HTTP API (``python -m adapters.bench --clients ...``):
the OpenAI-compatible routes served by uvicorn on a local port, every client the official
``openai`` package streaming its answer, one run per serving engine.

Each engine gets a fresh session and server, so PyTorch's batching scheduler and llama.cpp's
single stream are measured the same way, in the same run, on the same adapters and questions.
Requests carry ``min_tokens`` (vLLM's extension, which the API accepts) so every answer is
exactly ``tokens`` long.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from adapters.generate import GenerationSettings
from adapters.serve.bench_clients import Submit, bench_clients


def openai_submit(base_url: str) -> Submit:
    """A submit callable that streams one chat completion through the ``openai`` client."""
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=900)

    def submit(messages: list[dict], adapter: str | None, settings: GenerationSettings) -> Iterator[str]:
        stream = client.chat.completions.create(
            model=adapter or "base", messages=messages, stream=True, temperature=0,
            max_tokens=settings.max_new_tokens, extra_body={"min_tokens": settings.min_new_tokens})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return submit


def measure_api(model_path, shelf, engine: str, dtype: str, clients: list[int], adapters: list,
                tokens: int, log: Callable[[str], None] | None = None,
                check: int = 16) -> tuple[str, list[dict]]:
    """One engine (``pytorch``, ``llama.cpp`` or ``auto``) behind a fresh API server:
    (label of what answered, one row per client count)."""
    from fastapi import FastAPI

    from adapters.serve.engines import Engines, label
    from adapters.serve.local_server import serving
    from adapters.serve.openai_api import OpenAIServer
    from adapters.session import ModelSession

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
