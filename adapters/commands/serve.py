"""``python -m adapters serve``: the OpenAI-compatible API alone, without the browser app.

The same routes the app mounts beside its pages (``python app.py`` serves them too).
"""

from __future__ import annotations

import argparse
import os

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=os.environ.get("TUNEDESK_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default=os.environ.get("TUNEDESK_MODEL", "default"), help="base model")
    p.add_argument("--home", default=None, help="data folder (default $TUNEDESK_HOME or ./outputs)")
    p.add_argument("--engine", default=os.environ.get("TUNEDESK_ENGINE", "auto"),
                   choices=["auto", "pytorch", "llama.cpp"], help="who answers (auto: measured)")
    p.add_argument("--api-key", default=os.environ.get("TUNEDESK_API_KEY"),
                   help="bearer key clients must send (default $TUNEDESK_API_KEY)")


def build(model: str = "default", engine: str = "auto", api_key: str | None = None):
    """The FastAPI app serving ``model`` and the shelf of the current home."""
    from fastapi import FastAPI

    from adapters.serve.engines import Engines
    from adapters.serve.openai_api import OpenAIServer
    from adapters.session import ModelSession
    from finetune.hardware import detect
    from finetune.train import runner

    # TUNEDESK_DTYPE (auto | float32 | bfloat16 | float16): the serving dtype, as in the app
    session = ModelSession(model, device=detect().default_device, cores_busy=runner.any_running,
                           dtype=os.environ.get("TUNEDESK_DTYPE", "auto"))
    engines = Engines(session, engine)
    app = FastAPI(title="TuneDesk OpenAI-compatible API")
    app.include_router(OpenAIServer(engines, api_key).router())
    app.state.engines = engines
    return app


def warn_unpassed() -> list[str]:
    """Log a warning line per shelf adapter that has not passed its release gate (served anyway)."""
    import logging

    from adapters.gate_rules import shelf_warnings
    from adapters.store import Shelf

    lines = shelf_warnings(Shelf())
    log = logging.getLogger("tunedesk.serve")
    if lines and not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    for line in lines:
        log.warning("served anyway: %s", line)
    return lines


def main(args: argparse.Namespace) -> int:
    import uvicorn

    if args.host not in LOCAL_HOSTS and not args.api_key:
        raise ValueError(f"refusing to listen on {args.host} without an API key; "
                         "set --api-key or TUNEDESK_API_KEY")
    if args.home:
        os.environ["TUNEDESK_HOME"] = args.home
    app = build(args.model, args.engine, args.api_key)
    warn_unpassed()
    app.state.engines.prepare(wait=False)  # load and measure while the server starts
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
