"""core/llama_cpp/process.py: one request's tokens decode on one thread on a machine of two
cores (``-t 1``) while prompts and batched requests keep every thread (``-tb``); more cores keep
llama.cpp's own choice; the operator's TUNEDESK_LLAMA_DECODE_THREADS wins; a bad value is a
sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.llama_cpp.process import DECODE_THREADS_ENV, LlamaServerProcess


def _threads(tmp_path: Path, threads: int, **kw) -> tuple[str, str]:
    server = LlamaServerProcess(
        tmp_path / "llama-server", tmp_path / "base.gguf", [], slots=1, ctx_per_slot=256,
        threads=threads, log=tmp_path / "llama.log", **kw,
    )  # fmt: skip
    server.repack = True
    command = server.command()
    return command[command.index("-t") + 1], command[command.index("-tb") + 1]


def test_two_cores_decode_on_one_thread_and_read_prompts_on_both(monkeypatch, tmp_path):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    assert _threads(tmp_path, 2) == ("1", "2")
    assert _threads(tmp_path, 1) == ("1", "1")
    assert _threads(tmp_path, 8) == ("8", "8")  # not measured there: llama.cpp's own choice
    assert _threads(tmp_path, 2, decode_threads=2) == ("2", "2")


def test_the_operators_decode_threads_reach_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setenv(DECODE_THREADS_ENV, " 3 ")
    assert _threads(tmp_path, 2) == ("3", "2")
    assert _threads(tmp_path, 16) == ("3", "16")


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "all"])
def test_decode_threads_that_are_not_a_whole_number_are_a_sentence(monkeypatch, tmp_path, value):
    monkeypatch.setenv(DECODE_THREADS_ENV, value)
    with pytest.raises(ValueError, match="must be a whole number of threads, at least 1"):
        _threads(tmp_path, 2)
