"""core/llama_cpp/process.py: how much host memory llama-server's prompt cache may hold, as its
command line says it: the operator's TUNEDESK_LLAMA_CACHE_MIB where set, else half the machine's
memory and never less than llama-server's own 8 GiB; a bad value is a sentence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.llama_cpp.process import LlamaServerProcess
from core.llama_cpp.prompt_cache import CACHE_ENV, cache_ram_mib


def _command(tmp_path: Path) -> list[str]:
    server = LlamaServerProcess(
        tmp_path / "llama-server", tmp_path / "base.gguf", [tmp_path / "a.gguf"], slots=1,
        ctx_per_slot=256, threads=1, log=tmp_path / "llama.log",
    )  # fmt: skip
    server.repack = True
    return server.command()


def test_the_cache_is_half_the_machines_memory_and_at_least_8_gib(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    size = cache_ram_mib()
    assert size >= 8192
    assert size == 8192 or abs(size - memory / 2) <= 1


def test_the_operators_size_reaches_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setattr("core.llama_cpp.process.keys_prompt_cache_by_adapter", lambda b: True)
    monkeypatch.setenv(CACHE_ENV, " 3000 ")
    command = _command(tmp_path)
    assert command[command.index("--cache-ram") + 1] == "3000"
    monkeypatch.setenv(CACHE_ENV, "0")  # off, as llama-server reads 0
    assert cache_ram_mib() == 0


@pytest.mark.parametrize("value", ["8g", "-1", "1.5", "lots"])
def test_a_size_that_is_not_whole_mib_is_a_sentence(monkeypatch, value):
    monkeypatch.setenv(CACHE_ENV, value)
    with pytest.raises(ValueError, match="must be a whole number of MiB"):
        cache_ram_mib()


def test_the_disk_tier_is_twice_the_memory_within_a_quarter_of_the_free_disk(monkeypatch, tmp_path):
    import shutil

    from core.llama_cpp.prompt_cache import DISK_ENV, cache_disk_mib

    monkeypatch.delenv(DISK_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, "3000")
    free = shutil.disk_usage(tmp_path).free / 2**20
    assert cache_disk_mib(tmp_path) == int(min(6000, free / 4))
    assert cache_disk_mib(tmp_path / "not" / "made" / "yet") == cache_disk_mib(tmp_path)
    monkeypatch.setenv(DISK_ENV, "500")
    assert cache_disk_mib(tmp_path) == 500
    monkeypatch.setenv(CACHE_ENV, "0")  # no memory tier: nothing moves below it
    assert cache_disk_mib(tmp_path) == 0
    monkeypatch.setenv(DISK_ENV, "a lot")
    with pytest.raises(ValueError, match=f"{DISK_ENV} must be a whole number of MiB"):
        cache_disk_mib(tmp_path)


def test_the_folder_reaches_the_command_line_only_while_the_server_has_one(monkeypatch, tmp_path):
    monkeypatch.setattr("core.llama_cpp.process.keys_prompt_cache_by_adapter", lambda b: True)
    monkeypatch.setenv(CACHE_ENV, "3000")
    server = LlamaServerProcess(
        tmp_path / "llama-server", tmp_path / "base.gguf", [tmp_path / "a.gguf"], slots=1,
        ctx_per_slot=256, threads=1, log=tmp_path / "llama.log",
    )  # fmt: skip
    server.repack = True
    assert "--cache-disk" not in server.command()  # not started: no folder yet
    server.cache_disk, server.cache_disk_mib = tmp_path / "states", 700
    command = server.command()
    assert command[command.index("--cache-disk") + 1] == str(tmp_path / "states")
    assert command[command.index("--cache-disk-mib") + 1] == "700"
    assert server.cache_mib() == 3700
    monkeypatch.setattr("core.llama_cpp.process.keys_prompt_cache_by_adapter", lambda b: False)
    server.cache_disk = None  # an upstream build with LoRA files: no cache at all
    assert "--cache-disk" not in server.command() and server.cache_mib() == 0


def test_a_folder_left_by_an_app_that_is_gone_is_swept(monkeypatch, tmp_path):
    import subprocess

    from core.llama_cpp.prompt_cache import FOLDERS, new_disk_folder

    monkeypatch.setenv("TUNEDESK_HOME", str(tmp_path))
    root = tmp_path.joinpath(*FOLDERS)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = root / f"{dead.pid}-0badcafe"  # a killed app's server left its states
    left.mkdir(parents=True)
    (left / "state-0.bin").write_bytes(b"\0" * 64)
    alive = root / f"{os.getppid()}-00c0ffee"  # another app, still running
    alive.mkdir()
    mine = new_disk_folder()
    assert mine.parent == root and mine.name.startswith(f"{os.getpid()}-")
    assert list(mine.iterdir()) == []
    assert not left.exists() and alive.exists()
