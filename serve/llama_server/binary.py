"""Where llama.cpp's own ``llama-server`` is: built by ``make llama`` from the same
pinned llama.cpp source as the converters, or named by ``TUNEDESK_LLAMA_SERVER``."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TUNEDESK_LLAMA_SERVER"
BUILT = Path(__file__).resolve().parents[2] / ".venv" / "llama.cpp" / "build" / "bin" / "llama-server"


def server_binary() -> Path | None:
    """The llama-server executable, or None while it is not built."""
    named = os.environ.get(ENV)
    path = Path(named) if named else BUILT
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_reason() -> str:
    """One sentence on why llama-server is not there and what makes it."""
    named = os.environ.get(ENV)
    if named:
        return f"{ENV} names {named}, which is not an executable file"
    building = (BUILT.parents[2] / "build.log").is_file()
    if building:
        return "llama-server is being built (make llama; log: .venv/llama.cpp/build.log)"
    return "llama-server is not built; `make llama` builds it (about 10-12 minutes on 2 cores)"
