"""Where llama.cpp's tools are.

``make setup`` downloads ``llama-cpp-python==0.3.36``'s source archive once and extracts the
converters into ``<venv>/llama.cpp/`` (or ``$TUNEDESK_LLAMA_CPP_DIR``); ``make llama`` builds
``llama-server`` and ``llama-quantize`` from the same archive into ``build/bin`` there, so
converters and runtime come from one llama.cpp commit. ``TUNEDESK_LLAMA_SERVER`` names another
llama-server executable.

``make run`` builds them in the background under ``flock`` on ``build.lock`` there, writing
``build.log``: the lock is held exactly while a build runs (the kernel drops it when the build's
processes end), so a leftover log or lock file never reads as "building". The build waits while
a training run trains (:mod:`core.llama_cpp.build_pause`); ``build.paused`` says so meanwhile.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import sys
from pathlib import Path

from core.activity import pid_alive

LLAMA_CPP_PYTHON = "0.3.36"  # the source archive everything comes from
SERVER_ENV = "TUNEDESK_LLAMA_SERVER"
BUILD_MINUTES = "about 10-12 minutes on 2 cores"
PAUSED_FILE = "build.paused"  # "<pid> <start>" of the process that stopped the build


def tools_dir() -> Path:
    """Where the extracted converters live: ``$TUNEDESK_LLAMA_CPP_DIR`` or ``<venv>/llama.cpp``."""
    return Path(os.environ.get("TUNEDESK_LLAMA_CPP_DIR") or Path(sys.prefix) / "llama.cpp")


def built(name: str) -> Path:
    """Where ``make llama`` puts executable ``name`` (``llama-server``, ``llama-quantize``)."""
    return tools_dir() / "build" / "bin" / name


def executable(name: str) -> Path | None:
    """Executable ``name`` if it is there (``llama-server``: ``TUNEDESK_LLAMA_SERVER`` first)."""
    named = os.environ.get(SERVER_ENV) if name == "llama-server" else None
    path = Path(named) if named else built(name)
    return path if path.is_file() and os.access(path, os.X_OK) else None


# Strings only the patched server holds (patches/llama.cpp/): a prompt state is restored only for
# the adapters it was read with; states beyond --cache-ram move to a folder (--cache-disk).
_PER_ADAPTER_CACHE_MARK = b"slot read its prompt with other adapters"
_DISK_CACHE_MARK = b"states beyond --cache-ram move to"


def keys_prompt_cache_by_adapter(binary: Path) -> bool:
    """Whether llama-server executable ``binary`` restores a saved prompt state only for the
    adapters it was read with: ``make llama`` builds it so; upstream llama-server (another one
    named by ``TUNEDESK_LLAMA_SERVER``) restores by tokens alone (llama.cpp issue #26207)."""
    return _holds(binary, _PER_ADAPTER_CACHE_MARK)


def spills_prompt_cache_to_disk(binary: Path) -> bool:
    """Whether llama-server executable ``binary`` takes ``--cache-disk``: the prompt states its
    host-memory cache has no room for move to files there rather than being dropped (``make
    llama`` builds it so; upstream has no such option)."""
    return _holds(binary, _DISK_CACHE_MARK)


def _holds(binary: Path, mark: bytes) -> bool:
    try:
        stat = os.stat(binary)
    except OSError:
        return False
    return _holds_mark(str(binary), mark, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _holds_mark(binary: str, mark: bytes, _mtime_ns: int, _size: int) -> bool:
    """Whether file ``binary`` (as of that modification time and size) holds ``mark``."""
    try:
        with open(binary, "rb") as file:
            tail = b""
            while chunk := file.read(1 << 20):
                if mark in tail + chunk:
                    return True
                tail = chunk[-len(mark) :]
    except OSError:
        return False
    return False


def server_binary() -> Path | None:
    """The llama-server executable, or None while it is not built."""
    return executable("llama-server")


def building() -> bool:
    """Whether a build started by ``make run`` holds ``build.lock`` now."""
    try:
        fd = os.open(tools_dir() / "build.lock", os.O_RDONLY)
    except OSError:  # no lock file: no build was ever started here
        return False
    try:
        # A shared lock for an instant: it fails only while the build holds its exclusive one.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def build_paused() -> bool:
    """Whether a build ``make run`` started is stopped now while a training run trains."""
    try:
        pid, start = (int(n) for n in (tools_dir() / PAUSED_FILE).read_text().split()[:2])
    except (OSError, ValueError):
        return False
    return pid_alive(pid, start) and building()


def build_progress() -> str | None:
    """The build's progress from the last ``[ NN%]`` line cmake wrote to ``build.log``
    (``47%``), ``starting`` before its first one, or None when the log is missing."""
    try:
        with open(tools_dir() / "build.log", "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 8192))
            tail = log.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.findall(r"\[\s*(\d{1,3})%\]", tail)
    return f"{found[-1]}%" if found else "starting"


def missing_reason(name: str = "llama-server") -> str:
    """One sentence on why executable ``name`` is not there and what makes it."""
    named = os.environ.get(SERVER_ENV) if name == "llama-server" else None
    if named:
        return f"{SERVER_ENV} names {named}, which is not an executable file"
    log = tools_dir() / "build.log"
    if building():
        waits = ", waiting while a training run trains" if build_paused() else ""
        return (
            f"{name} is being built, {build_progress()} done{waits} (log: {log}); it takes over "
            "when ready"
        )
    if log.is_file():
        return (
            f"{name} is not built: the last build stopped before it (log: {log}); `make "
            "llama` builds it"
        )
    return f"{name} is not built; `make llama` builds it ({BUILD_MINUTES})"


def amx_cpu() -> bool:
    """Whether this CPU has AMX (Intel Sapphire Rapids and later): llama.cpp then repacks
    quantized weights for its AMX kernels unless told not to."""
    try:
        return "amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
