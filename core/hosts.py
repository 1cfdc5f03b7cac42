"""Addresses that only this machine reaches: listening anywhere else needs a login or a key.

A server listening off localhost (or through a share link) is *exposed*: its users may be
anyone the network lets in. Then path boxes read only under the home folder (and the project's
own demo data), and error text carries no internals (:func:`core.user_text.public_text`).
The app and ``python -m serve`` say so once, at start (:func:`set_exposed`).
"""

from __future__ import annotations

import os

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
EXPOSED_ENV = "TUNEDESK_EXPOSED"  # "1": this process serves users off localhost


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS


def set_exposed(host: str, share: bool = False) -> bool:
    """Record whether this process listens off localhost (``share``: a Gradio share link)."""
    exposed_now = share or not is_local(host)
    os.environ[EXPOSED_ENV] = "1" if exposed_now else "0"
    return exposed_now


def exposed() -> bool:
    """True when this process serves users off localhost (see :func:`set_exposed`)."""
    return os.environ.get(EXPOSED_ENV) == "1"
