"""``python -m serve``: the OpenAI-compatible API alone, without the browser app.

The same routes the app mounts beside its pages (``python app.py`` serves them too).
"""

from __future__ import annotations

import argparse
import os
import sys

from core.hosts import is_local, set_exposed
from serve.interface.bounds import set_answer_bound

STOP_GRACE_S = 3.0  # after SIGTERM, responses in flight (now errors) get this long to be sent


def build_parser() -> argparse.ArgumentParser:
    from core.cli import DefaultsFormatter
    from serve.flags import add_serving_flags, port_number

    p = argparse.ArgumentParser(prog="python -m serve", description=__doc__.splitlines()[0])
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    add_serving_flags(p)
    p.add_argument("--port", type=port_number, default=8000, help="port to listen on")
    p.add_argument("--home", default=None, help="data folder (default $TUNEDESK_HOME or ./outputs)")
    return p


def build(
    model: str = "default", engine: str = "auto", api_key=None, log_conversations: bool = False
):
    """The FastAPI app serving ``model`` and the shelf of the current home (``api_key``: a
    :class:`serve.keys.KeyRing`, one chat key, or None)."""
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
    """``python -m serve``: its exit code (2: bad input; 1: an internal error, traced in a log)."""
    from core.cli import guarded

    return guarded(lambda: _serve(argv), "python -m serve")


def _serve(argv: list[str] | None) -> int:
    from serve.flags import check_home, check_listen, listening_line
    from serve.keys import ADMIN_ENV, CHAT_ENV, key_ring

    args = build_parser().parse_args(argv)
    try:
        keys = key_ring(args.api_key, closed=not is_local(args.host))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not is_local(args.host) and keys.empty:
        print(
            f"error: refusing to listen on {args.host} without an API key; "
            f"set {CHAT_ENV} (and {ADMIN_ENV}) as name:key pairs, or --api-key",
            file=sys.stderr,
        )
        return 2
    try:
        set_answer_bound(args.answer_idle_timeout, args.answer_timeout)
        if args.home:
            check_home(args.home)
        check_listen(args.host, args.port)  # a bad address, or a port in use, before loading
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.home:
        os.environ["TUNEDESK_HOME"] = args.home
    from core.models import is_default, resolve

    if not is_default(args.model):  # a name that cannot load ends here, not in a server thread
        resolve(args.model)
    set_exposed(args.host)  # off localhost: error answers carry no class names or server paths
    import uvicorn

    from serve.assembly import warn_unpassed

    app = build(args.model, args.engine, keys, args.log_conversations)
    warn_unpassed()
    app.state.engines.prepare(wait=False)  # load and measure while the server starts
    # Keep idle connections 75 s (uvicorn's default is 5 s): a client reusing one just as the
    # server closes it gets "Server disconnected" (seen in python -m bench gateway).
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_keep_alive=75,
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    line = listening_line("serving the OpenAI-compatible API", args.host, args.port, keys)
    stopping_server(config, app.state.engines, line).run()
    return 0


def stopping_server(config, engines, listening: str | None = None):
    """A uvicorn server whose SIGTERM / Ctrl-C first ends every answer in flight with an error
    (``Engines.close``): uvicorn alone waits for them to finish, forever for a stuck one. Once
    it listens it prints ``listening`` (where, and who may call), when given."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started and listening:
                print(listening, flush=True)

        def handle_exit(self, sig, frame) -> None:
            engines.close()
            super().handle_exit(sig, frame)

    return Server(config)


if __name__ == "__main__":
    from core.optional_imports import keep_bitsandbytes_out

    keep_bitsandbytes_out()  # serving quantizes nothing: 1.3-1.5 s less at each start
    sys.exit(main())
