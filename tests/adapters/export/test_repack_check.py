"""core/llama_cpp/repack_check.py (here for the export fixtures that make a tiny convertible GGUF):
llama.cpp's weight repacking on AMX CPUs: checked at the first start, a crash or a hang falls
back to --no-repack with a sentence, the verdict is remembered, the operator can force it."""

from __future__ import annotations

import pytest
from llama_run import llama_or_skip

from adapters.export.gguf_cache import ensure_base_gguf
from core.llama_cpp import one_shot, process, repack_check


def stand_in(folder, real, without_no_repack: str):
    """An executable that runs the real llama-server when given --no-repack, and otherwise does
    ``without_no_repack`` (a crash, a hang); it counts its starts in ``starts``."""
    script = folder / "llama-server"
    script.write_text(f"""#!/bin/sh
echo start >> {folder}/starts
case " $* " in *" --no-repack "*) exec {real} "$@";; esac
{without_no_repack}
""")
    script.chmod(0o755)
    return script


@pytest.fixture
def amx(monkeypatch):
    monkeypatch.setattr(process, "amx_cpu", lambda: True)  # what an AMX CPU does, on any CPU
    monkeypatch.delenv(repack_check.ENV, raising=False)


@pytest.fixture(scope="module")
def converted(tiny_real_tok, tmp_path_factory):
    """The tiny model's Q8_0 GGUF, converted once for the module (7-8 s on one core)."""
    return ensure_base_gguf(
        str(tiny_real_tok("llama")), "q8_0", home=tmp_path_factory.mktemp("repack-gguf")
    )


@pytest.fixture
def gguf(home, converted):
    """That GGUF, with a fresh home for each test (where the verdicts are remembered)."""
    return converted


def serve(binary, gguf, log):
    server = process.LlamaServerProcess(binary, gguf, [], slots=1, ctx_per_slot=64, log=log)
    return server.start(timeout=60)


@pytest.mark.parametrize(
    "failure, said",
    [("kill -SEGV $$", "died of SIGSEGV"), ("exec sleep 600", "was not ready within 3 s")],
)
def test_a_repacking_failure_falls_back_with_a_sentence_and_is_remembered(
    amx, gguf, tmp_path, monkeypatch, failure, said
):
    monkeypatch.setattr(repack_check, "CHECK_READY_SECONDS", 3.0)
    binary = stand_in(tmp_path, llama_or_skip(), failure)
    server = serve(binary, gguf, tmp_path / "log")
    try:
        assert server.running and server.repack is False and "--no-repack" in server.command()
        assert said in server.note and "runs with --no-repack" in server.note
        assert server.note in (tmp_path / "log").read_text()
        assert one_shot.tokenize(server, "hello")  # it answers
    finally:
        server.stop()
    assert (tmp_path / "starts").read_text().count("start") == 2  # checked, then without repacking
    assert repack_check.remembered(binary) == repack_check.Verdict(False, server.note)
    again = serve(binary, gguf, tmp_path / "log2")  # the verdict holds: no second check
    again.stop()
    assert again.repack is False and (tmp_path / "starts").read_text().count("start") == 3


def test_where_repacking_works_it_stays_on(amx, gguf, tmp_path):
    # A server whose repacking works, on any CPU: the stand-in answers when started without
    # --no-repack (it runs the real one with it, so this CPU's own repacking plays no part).
    real = llama_or_skip()
    binary = stand_in(tmp_path, real, f'exec {real} "$@" --no-repack')
    server = serve(binary, gguf, tmp_path / "log")
    try:
        assert server.running and one_shot.tokenize(server, "hello")  # the check's tokens came
    finally:
        server.stop()
    assert server.repack is True and server.note == "" and "--no-repack" not in server.command()
    assert (tmp_path / "starts").read_text().count("start") == 1  # checked once, kept running
    assert repack_check.remembered(binary) == repack_check.Verdict(True)
    again = serve(binary, gguf, tmp_path / "log2")  # the verdict holds: no second check
    again.stop()
    assert again.repack is True and (tmp_path / "starts").read_text().count("start") == 2


def test_the_operator_forces_it_either_way_and_other_cpus_never_check(gguf, tmp_path, monkeypatch):
    binary = stand_in(tmp_path, llama_or_skip(), "kill -SEGV $$")
    monkeypatch.setattr(process, "amx_cpu", lambda: True)
    monkeypatch.setenv(repack_check.ENV, "0")
    server = serve(binary, gguf, tmp_path / "log")
    server.stop()
    assert server.repack is False and "TUNEDESK_LLAMA_AMX=0" in server.note
    assert (tmp_path / "starts").read_text().count("start") == 1
    monkeypatch.setenv(repack_check.ENV, "1")
    assert (
        "--no-repack"
        not in process.LlamaServerProcess(binary, gguf, [], log=tmp_path / "l").command()
    )
    monkeypatch.delenv(repack_check.ENV)
    monkeypatch.setattr(process, "amx_cpu", lambda: False)
    assert (
        "--no-repack"
        not in process.LlamaServerProcess(binary, gguf, [], log=tmp_path / "l").command()
    )
    assert repack_check.remembered(binary) is None  # nothing was checked or stored


def test_forcing_it_off_holds_on_a_cpu_without_amx_too(gguf, tmp_path, monkeypatch):
    # How a machine without AMX runs the tests as an AMX Xeon whose repacking crashes runs them.
    binary = stand_in(tmp_path, llama_or_skip(), "kill -SEGV $$")
    monkeypatch.setattr(process, "amx_cpu", lambda: False)
    monkeypatch.setenv(repack_check.ENV, "0")
    server = serve(binary, gguf, tmp_path / "log")
    try:
        assert server.running and one_shot.tokenize(server, "hello")
    finally:
        server.stop()
    assert server.repack is False and "--no-repack" in server.command()
    assert server.note == f"{repack_check.ENV}=0 turns llama.cpp's weight repacking off"
    assert (tmp_path / "starts").read_text().count("start") == 1
    assert repack_check.remembered(binary) is None  # an order, not a verdict about the machine


def test_a_verdict_is_for_one_binary_on_one_machine(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("one build")
    repack_check.remember(binary, repack_check.Verdict(False, "why"))
    assert repack_check.remembered(binary) == repack_check.Verdict(False, "why")
    binary.write_text("another build, longer")  # rebuilt: asked again
    assert repack_check.remembered(binary) is None
    (tmp_path / repack_check.VERDICT_FILE).write_text("not json")
    assert repack_check.remembered(binary) is None
