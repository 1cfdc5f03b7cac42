"""Whether llama.cpp is being built, and how far: ``make run``'s build holds ``build.lock``
(flock) while it runs and writes cmake's ``[ NN%]`` lines to ``build.log``."""

from __future__ import annotations

import fcntl

import pytest

from core.llama_cpp import binaries


@pytest.fixture
def llama_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path))
    monkeypatch.delenv(binaries.SERVER_ENV, raising=False)
    return tmp_path


def test_a_held_lock_is_a_build_and_a_leftover_one_is_not(llama_dir):
    assert not binaries.building()  # no lock file at all
    (llama_dir / "build.lock").touch()  # left by a build that ended (or was killed)
    (llama_dir / "build.log").write_text(
        "[ 30%] Building CXX object\nmake: *** [Makefile] Error 2\n"
    )
    assert not binaries.building()
    assert "the last build stopped before it" in binaries.missing_reason()
    with open(llama_dir / "build.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what `flock build.lock sh -c 'make llama ...'` holds
        assert binaries.building()
        assert binaries.missing_reason().startswith("llama-server is being built, 30% done (log: ")
    assert not binaries.building()  # closed: the kernel dropped the lock


def test_progress_is_cmakes_last_percentage(llama_dir):
    assert binaries.build_progress() is None
    log = llama_dir / "build.log"
    log.write_text("-- Configuring done\n")
    assert binaries.build_progress() == "starting"
    log.write_text(
        "-- Configuring done\n[  4%] Building C object ggml.c.o\n"
        + "noise\n" * 3000
        + "[ 57%] Building CXX object llama.cpp.o\n[ 61%] Linking CXX static library\n"
    )
    assert binaries.build_progress() == "61%"


def test_nothing_built_and_no_log_says_how_to_build(llama_dir):
    assert binaries.server_binary() is None
    assert (
        binaries.missing_reason()
        == f"llama-server is not built; `make llama` builds it ({binaries.BUILD_MINUTES})"
    )


def test_only_a_server_holding_the_patchs_mark_keys_its_cache_by_adapter(tmp_path):
    """Upstream llama-server (another one named by TUNEDESK_LLAMA_SERVER) is recognised as such,
    wherever the mark would fall in the file, even across the reader's 1 MiB chunks."""
    upstream = tmp_path / "upstream"
    upstream.write_bytes(b"\0" * (3 << 20))
    assert not binaries.keys_prompt_cache_by_adapter(upstream)
    assert not binaries.keys_prompt_cache_by_adapter(tmp_path / "absent")
    mark = b"slot read its prompt with other adapters"
    for at in (0, (1 << 20) - len(mark) // 2, (3 << 20) - len(mark)):
        patched = tmp_path / f"patched-{at}"
        data = bytearray(3 << 20)
        data[at : at + len(mark)] = mark
        patched.write_bytes(bytes(data))
        assert binaries.keys_prompt_cache_by_adapter(patched), at
    built = binaries.built("llama-server")
    if built.is_file():  # make llama built it with the patch
        assert binaries.keys_prompt_cache_by_adapter(built)
