"""``python -m serve``: the OpenAI-compatible API alone, without the browser app.

The same routes the app mounts beside its pages (``python app.py`` serves them too).
"""

from __future__ import annotations

import argparse
import os
import sys

from core.hosts import is_local


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m serve", description=__doc__.splitlines()[0])
    p.add_argument("--host", default=os.environ.get("TUNEDESK_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default=os.environ.get("TUNEDESK_MODEL", "default"), help="base model")
    p.add_argument("--home", default=None, help="data folder (default $TUNEDESK_HOME or ./outputs)")
    p.add_argument("--engine", default=os.environ.get("TUNEDESK_ENGINE", "auto"),
                   choices=["auto", "pytorch", "llama.cpp"], help="who answers (auto: measured)")
    p.add_argument("--api-key", default=os.environ.get("TUNEDESK_API_KEY"),
                   help="bearer key clients must send (default $TUNEDESK_API_KEY)")
    p.add_argument("--log-conversations", action="store_true",
                   default=os.environ.get("TUNEDESK_LOG_CONVERSATIONS") == "1",
                   help="keep every answer's conversation (redacted) in the home folder, for feedback "
                        "and training (default off; $TUNEDESK_LOG_CONVERSATIONS=1)")
    return p


def build(model: str = "default", engine: str = "auto", api_key: str | None = None,
          log_conversations: bool = False):
    """The FastAPI app serving ``model`` and the shelf of the current home."""
    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.assembly import build_services
    from serve.openai_api import OpenAIServer

    services = build_services(model, engine)
    app = FastAPI(title="TuneDesk OpenAI-compatible API")
    store = FeedbackStore(log_conversations=log_conversations)
    app.include_router(OpenAIServer(services.engines, api_key, store).router())
    app.state.engines = services.engines
    return app


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not is_local(args.host) and not args.api_key:
        print(f"error: refusing to listen on {args.host} without an API key; "
              "set --api-key or TUNEDESK_API_KEY", file=sys.stderr)
        return 2
    if args.home:
        os.environ["TUNEDESK_HOME"] = args.home
    import uvicorn

    from serve.assembly import warn_unpassed

    app = build(args.model, args.engine, args.api_key, args.log_conversations)
    warn_unpassed()
    app.state.engines.prepare(wait=False)  # load and measure while the server starts
    # Keep idle connections 75 s (uvicorn's default is 5 s): a client reusing one just as the
    # server closes it gets "Server disconnected" (seen in python -m bench gateway).
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_keep_alive=75)
    return 0


if __name__ == "__main__":
    sys.exit(main())
