"""core/llama_cpp/process.py: how much host memory llama-server's prompt cache may hold, as its
command line says it: the operator's TUNEDESK_LLAMA_CACHE_MIB where set, else half the machine's
memory and never less than llama-server's own 8 GiB; a bad value is a sentence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.llama_cpp.process import CACHE_ENV, LlamaServerProcess, cache_ram_mib


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
