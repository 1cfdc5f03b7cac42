"""core/llama_cpp/decode_check.py (here for the export fixtures that make a tiny convertible
GGUF): the first server the app starts measures one decoding thread against all of them, keeps
the faster-enough choice beside the binary, and later servers reuse it; the operator's variable
wins without a measurement; a probe that fails leaves the unmeasured default."""

from __future__ import annotations

import pytest
from llama_run import llama_or_skip

from adapters.export.gguf_cache import ensure_base_gguf
from core.llama_cpp import decode_check
from core.llama_cpp.machine_facts import recalled
from core.llama_cpp.process import DECODE_THREADS_ENV


@pytest.fixture(scope="module")
def gguf(tiny_real_tok, tmp_path_factory):
    """The tiny model's Q8_0 GGUF, converted once for the module."""
    return ensure_base_gguf(
        str(tiny_real_tok("llama")), "q8_0", home=tmp_path_factory.mktemp("decode-gguf")
    )


def counting(folder, real) -> object:
    """An executable in ``folder`` (so the measurement is kept there, not beside the real
    build) that logs each start's arguments in ``starts`` and runs the real llama-server."""
    script = folder / "llama-server"
    script.write_text(f'#!/bin/sh\necho " $* " >> {folder}/starts\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script


def _starts(folder) -> list[str]:
    path = folder / "starts"
    return path.read_text().splitlines() if path.exists() else []


def test_one_thread_is_measured_against_all_once_and_the_choice_is_kept(
    gguf, tmp_path, monkeypatch
):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    monkeypatch.setattr(decode_check, "sessions_grouped", lambda: False)
    binary = counting(tmp_path, llama_or_skip())
    chosen = decode_check.decode_threads(binary, gguf, 2, tmp_path / "log")
    starts = _starts(tmp_path)
    assert len(starts) == 2 and " -t 1 -tb 2 " in starts[0] and " -t 2 -tb 2 " in starts[1]
    kept = recalled(binary, decode_check.FACTS_FILE)
    rates = {int(t): rate for t, rate in kept["tok_s"].items()}
    assert set(rates) == {1, 2} and min(rates.values()) > 0
    assert kept["threads"] == 2 and kept["decode_threads"] == chosen
    assert chosen == decode_check.choose(rates, 2)
    assert decode_check.decode_threads(binary, gguf, 2, tmp_path / "log") == chosen
    assert len(_starts(tmp_path)) == 2  # remembered: no server started again
    monkeypatch.setenv(DECODE_THREADS_ENV, "3")
    assert decode_check.decode_threads(binary, gguf, 2, tmp_path / "log") == 3
    assert decode_check.decode_threads(binary, gguf, 1, tmp_path / "log") == 3
    monkeypatch.delenv(DECODE_THREADS_ENV)
    assert decode_check.decode_threads(binary, gguf, 1, tmp_path / "log") == 1  # nothing to pick
    assert len(_starts(tmp_path)) == 2


def test_one_thread_is_taken_only_where_it_keeps_most_of_all_threads_speed():
    assert decode_check.choose({1: 143.0, 2: 142.7}, 2) == 1  # EPYC with AVX512-BF16
    assert decode_check.choose({1: 95.0, 2: 100.0}, 2) == 1
    assert decode_check.choose({1: 55.0, 2: 94.9}, 2) == 2  # EPYC with AVX2 only
    assert decode_check.choose({1: 30.0, 8: 200.0}, 8) == 8


def test_where_sessions_share_the_cpu_first_two_cores_keep_one_thread_unmeasured(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    monkeypatch.setattr(decode_check, "sessions_grouped", lambda: True)
    never = tmp_path / "llama-server"
    never.write_text(f"#!/bin/sh\ntouch {tmp_path}/started\nexit 1\n")
    never.chmod(0o755)
    assert decode_check.decode_threads(never, tmp_path / "base.gguf", 2, tmp_path / "log") == 1
    assert not (tmp_path / "started").exists()


def test_a_probe_that_fails_leaves_the_unmeasured_choice_and_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    monkeypatch.setattr(decode_check, "sessions_grouped", lambda: False)
    broken = tmp_path / "llama-server"
    broken.write_text("#!/bin/sh\necho 'no such model' >&2\nexit 1\n")
    broken.chmod(0o755)
    assert decode_check.decode_threads(broken, tmp_path / "base.gguf", 2, tmp_path / "log") == 1
    assert recalled(broken, decode_check.FACTS_FILE) is None


def test_the_threads_bench_times_both_settings_beside_niced_neighbours(gguf, tmp_path):
    from bench import llama_threads

    rows = llama_threads.measure(
        llama_or_skip(), gguf, 2, [0, 1], tokens=8, runs=2, logs=tmp_path, nice=10
    )
    assert [(r["busy"], r["decode_threads"]) for r in rows] == [(0, 2), (0, 1), (1, 2), (1, 1)]
    assert all(r["median"] > 0 for r in rows), rows
    assert [r.get("neighbours_nice") for r in rows] == [None, None, 10, 10]
    with pytest.raises(SystemExit) as info:
        llama_threads.main(["--nice", "20"])
    assert info.value.code == 2
