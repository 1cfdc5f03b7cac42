"""How much llama-server's prompt cache may keep, in host memory and on disk, and its folders.

llama-server keeps the prompts its slots let go in host memory (``--cache-ram``:
:func:`cache_ram_mib`) and starts a new request from the saved state that shares the longest
beginning with it. TuneDesk's build (``patches/llama.cpp/``) adds a tier below it: when the
memory is full, the oldest states move to files of their own in a folder (``--cache-disk``,
at most :func:`cache_disk_mib`) instead of being dropped, and a prompt that begins like one
reads it back rather than computing it again (what that buys: docs/benchmarks.md).
Only the states' data goes there: their tokens stay in memory, so matching a prompt never
reads the disk.

Each llama-server gets a folder of its own under ``<home>/cache/llama-prompts/`` named by the
app's process id (:func:`new_disk_folder`); the server removes its files when it stops, the app
removes the folder, and a folder whose app is gone (killed) is swept when the next one is made.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from core import paths
from core.llama_cpp.binaries import keys_prompt_cache_by_adapter, spills_prompt_cache_to_disk

CACHE_ENV = "TUNEDESK_LLAMA_CACHE_MIB"
CACHE_FLOOR_MIB = 8192  # llama-server's own default: no machine gets less than it would
DISK_ENV = "TUNEDESK_LLAMA_CACHE_DISK_MIB"
DISK_TIMES_RAM = 2  # the folder's default: twice the memory tier ...
DISK_FREE_SHARE = 0.25  # ... and never more than this share of the disk's free space
FOLDERS = ("cache", "llama-prompts")


def cache_ram_mib() -> int:
    """MiB of host memory llama-server's prompt cache may hold (``--cache-ram``; the knowledge
    warm-up fills a share of it: serve/knowledge_warmup.py): ``TUNEDESK_LLAMA_CACHE_MIB`` where
    set (0 turns the cache off), else half the machine's memory, at least llama-server's own
    8 GiB.

    Raises:
        ValueError: the variable is not a whole number of MiB.
    """
    value = _whole_mib(CACHE_ENV, "turns llama-server's prompt cache off")
    if value is not None:
        return value
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return max(CACHE_FLOOR_MIB, memory // 2)


def cache_disk_mib(folder: Path | None = None) -> int:
    """MiB the prompt cache may keep on disk beyond its memory (``--cache-disk-mib``):
    ``TUNEDESK_LLAMA_CACHE_DISK_MIB`` where set (0: none, states beyond memory are dropped),
    else twice :func:`cache_ram_mib` and at most a quarter of the free space where the folders
    live (``folder``, default the home); 0 when the memory tier is off.

    Raises:
        ValueError: either variable is not a whole number of MiB.
    """
    ram = cache_ram_mib()
    value = _whole_mib(DISK_ENV, "keeps nothing on disk")
    if ram == 0:
        return 0
    if value is not None:
        return value
    where = folder or paths.home(create=False)
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free // 2**20
    return int(min(DISK_TIMES_RAM * ram, DISK_FREE_SHARE * free))


def kept_mib(binary: Path, loras: bool = True) -> int:
    """MiB the prompt cache of llama-server executable ``binary`` may keep, memory and disk: 0
    where it holds LoRA files (``loras``) and does not key its states by adapter, so runs without
    the cache; the disk tier only where the build has one."""
    if cache_ram_mib() == 0 or (loras and not keys_prompt_cache_by_adapter(binary)):
        return 0
    return cache_ram_mib() + disk_mib(binary)


def disk_mib(binary: Path) -> int:
    """:func:`cache_disk_mib` where executable ``binary`` has the disk tier, else 0."""
    return cache_disk_mib() if spills_prompt_cache_to_disk(binary) else 0


def new_disk_folder() -> Path:
    """A new, empty folder for one llama-server's states on disk (made; the folders of apps that
    are gone swept first)."""
    root = paths.home().joinpath(*FOLDERS)
    root.mkdir(parents=True, exist_ok=True)
    sweep(root)
    folder = root / f"{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir()
    return folder


def sweep(root: Path) -> list[Path]:
    """Remove the folders under ``root`` whose app process is no longer running; those removed."""
    gone = []
    for folder in root.iterdir():
        pid = folder.name.partition("-")[0]
        if folder.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def _whole_mib(env: str, zero: str) -> int | None:
    value = os.environ.get(env, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"{env} must be a whole number of MiB (0 {zero}), not {value[:40]!r}")
    return int(value)
