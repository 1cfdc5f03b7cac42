"""TuneDesk: `python app.py [--host H] [--port P] [--auth user:pass] [--home DIR] [--engine E]`.

Listens on 127.0.0.1 by default and refuses any other address (or a share link) without
authentication. Settings can also come from TUNEDESK_HOST / TUNEDESK_PORT / TUNEDESK_AUTH /
TUNEDESK_HOME. The /v1 API's keys are set apart from the pages' login: TUNEDESK_CHAT_KEYS and
TUNEDESK_ADMIN_KEYS (``name:key,...``; see serve/keys.py and docs/guide.md "Keys and roles").
A bad flag value (an address this machine cannot listen on, a port in use, a malformed
``--auth`` or key) is one ``error:`` sentence and exit status 2, as argparse and
``python -m serve`` answer one.
"""

from __future__ import annotations

import argparse
import os
import sys

from core.hosts import is_local, set_exposed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from core.cli import DefaultsFormatter
    from serve.flags import add_serving_flags, port_number

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    add_serving_flags(p)
    p.add_argument(
        "--port",
        type=port_number,
        default=os.environ.get("TUNEDESK_PORT", "7860"),
        help="port to listen on ($TUNEDESK_PORT)",
    )
    p.add_argument(
        "--auth",
        default=os.environ.get("TUNEDESK_AUTH"),
        help="user:pass, the pages' login ($TUNEDESK_AUTH)",
    )
    p.add_argument(
        "--home",
        default=os.environ.get("TUNEDESK_HOME"),
        help="data folder ($TUNEDESK_HOME; ./outputs when neither is given)",
    )
    p.add_argument("--share", action="store_true", help="Gradio share link (needs --auth)")
    return p.parse_args(argv)


def check_access(host: str, auth: str | None, share: bool) -> tuple[str, str] | None:
    """Return (user, password) or None; refuse exposure without authentication.

    Raises:
        ValueError: with a sentence saying what to do.
    """
    creds = None
    if auth:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise ValueError("--auth must look like user:password")
        creds = (user, password)
    if (not is_local(host) or share) and creds is None:
        where = "a share link" if share else f"address {host}"
        raise ValueError(
            f"refusing to listen on {where} without authentication; add --auth user:password"
        )
    return creds


def api_keys(given: str | None, creds: tuple[str, str] | None, host: str = "127.0.0.1"):
    """The /v1 API's keys (``serve.keys.key_ring``: the named chat and admin keys, plus
    ``--api-key`` as a chat key). The pages' login is not a key: a server behind a login or off
    localhost with no key refuses every API request in a sentence saying what to set.

    Raises:
        ValueError: a malformed key variable, in a sentence.
    """
    from ui.app import key_ring

    return key_ring(given, closed=creds is not None or not is_local(host))


def main(argv: list[str] | None = None) -> int:
    """``python app.py``: its exit code (2: a bad flag value, in one sentence; 1: an internal
    error, traced in a log)."""
    from core.cli import guarded

    return guarded(lambda: _main(argv), "python app.py")


def _main(argv: list[str] | None) -> int:
    from serve.flags import check_home, check_listen

    args = parse_args(argv)
    creds = check_access(args.host, args.auth, args.share)
    check_listen(args.host, args.port)  # before the model and the pages load
    keys = api_keys(args.api_key, creds, "0.0.0.0" if args.share else args.host)
    set_exposed(
        args.host, args.share
    )  # off localhost: path boxes stay in the home, errors say no internals
    if args.home:
        check_home(args.home)  # ValueError: a sentence
        os.environ["TUNEDESK_HOME"] = args.home
    from ui.app import build_app, launch, set_answer_bound

    set_answer_bound(args.answer_idle_timeout, args.answer_timeout)  # ValueError: a sentence
    demo = build_app(base_model=args.model, serving=args.engine)
    launch(
        demo,
        host=args.host,
        port=args.port,
        auth=creds,
        share=args.share,
        api_key=keys,
        log_conversations=args.log_conversations,
    )
    return 0


if __name__ == "__main__":
    from core.optional_imports import keep_bitsandbytes_out

    # the app quantizes nothing itself (training and dry runs are child processes)
    keep_bitsandbytes_out()
    sys.exit(main())
