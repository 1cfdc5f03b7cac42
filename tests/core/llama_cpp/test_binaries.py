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
