"""The serving flags ``python app.py`` and ``python -m serve`` share, with one help text each.

Each flag's default comes from its environment variable where one is named, so a setting
reads the same in either command. No torch here.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
from pathlib import Path

from serve.interface.bounds import IDLE_ENV, IDLE_S, TOTAL_ENV, TOTAL_S


def port_number(text: str) -> int:
    """A ``--port`` value: a whole number from 1 to 65535 (argparse's type)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, not {text[:20]!r}")
    return port


def add_serving_flags(p: argparse.ArgumentParser) -> None:
    """Add ``--host``, ``--model``, ``--engine``, ``--api-key``, ``--log-conversations``,
    ``--answer-idle-timeout`` and ``--answer-timeout`` to ``p``."""
    from core.models import DEFAULT_MODEL

    p.add_argument(
        "--host",
        default=os.environ.get("TUNEDESK_HOST", "127.0.0.1"),
        help="address to listen on ($TUNEDESK_HOST)",
    )
    p.add_argument(
        "--model",
        default=os.environ.get("TUNEDESK_MODEL", "default"),
        help=f"base model: Hub id, local folder or 'default' ({DEFAULT_MODEL}; $TUNEDESK_MODEL)",
    )
    p.add_argument(
        "--engine",
        default=os.environ.get("TUNEDESK_ENGINE", "auto"),
        choices=["auto", "pytorch", "llama.cpp"],
        help="who answers Chat and the API (auto: measured; $TUNEDESK_ENGINE)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("TUNEDESK_API_KEY"),
        help="a chat key of the /v1 API, named api-key ($TUNEDESK_API_KEY); named keys: "
        "$TUNEDESK_CHAT_KEYS and $TUNEDESK_ADMIN_KEYS (name:key,...)",
    )
    p.add_argument(
        "--log-conversations",
        action="store_true",
        default=os.environ.get("TUNEDESK_LOG_CONVERSATIONS") == "1",
        help="keep every /v1 answer's conversation (redacted) in the home folder, for feedback "
        "and training (default off; $TUNEDESK_LOG_CONVERSATIONS=1)",
    )
    p.add_argument(
        "--answer-idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"an answer that makes no progress this long is cancelled with an error (504) "
        f"(default ${IDLE_ENV} or {IDLE_S:g})",
    )
    p.add_argument(
        "--answer-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"no answer takes longer than this from its request (default ${TOTAL_ENV} or "
        f"{TOTAL_S:g})",
    )


def check_listen(host: str, port: int) -> None:
    """Refuse, before anything loads, an address this machine cannot listen on: a ``--host``
    that is no address (or name) here, or a ``--port`` another server holds.

    Raises:
        ValueError: one sentence naming the flag and what to give instead.
    """
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise ValueError(
            f"--host {host[:80]!r} is not an address of this machine ({why}); give one such as "
            "127.0.0.1 (this machine only) or 0.0.0.0 (every network it is on)"
        ) from None
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ValueError(
                    f"--port {port} is in use on {host}: another server listens there; stop it "
                    "or give another --port"
                ) from None
            raise ValueError(
                f"cannot listen on {host}:{port} ({err.strerror or err}); give --host an address "
                "of this machine (127.0.0.1, 0.0.0.0) or another --port"
            ) from None


def listening_line(what: str, host: str, port: int, keys) -> str:
    """The line a server prints once it listens: where (``http://HOST:PORT``) and who may call
    its /v1 API, in a word (``keys``: a :class:`serve.keys.KeyRing`)."""
    from serve.keys import ADMIN_ENV, CHAT_ENV

    shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    if not keys.empty:
        access = (
            f"keyed: {len(keys.chat)} chat and {len(keys.admin)} admin key(s) "
            f"({CHAT_ENV}, {ADMIN_ENV}, --api-key)"
        )
    elif keys.closed:
        access = f"closed: no API key set, every request refused until {CHAT_ENV} is"
    else:
        access = "open: no API key asked (this machine only)"
    return f"{what} at http://{shown}:{port}/v1 ({access})"


def check_home(folder: str) -> None:
    """Refuse, before anything loads, a ``--home`` this process cannot make or write in (under
    a file, on a read-only disk, not permitted); it is made when missing.

    Raises:
        ValueError: one sentence naming the folder and why.
    """
    path = Path(folder).expanduser()
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(
            f"--home {folder} cannot hold TuneDesk's data ({err.strerror or err}); name a folder "
            "this user can write (it is made when missing)"
        ) from None
