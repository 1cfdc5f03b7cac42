"""`make run`'s real recipe on a copy of the Makefile: with llama.cpp not built it starts the
build in the background at the lowest priority, a second `make run` during the build starts
none, and the files a finished (or killed) build leaves behind do not stop the next one.

The copy's set-up stamps are in place and its variables point at a temporary folder; the build
is a stand-in command (LLAMA_BUILD_CMD) and the app an echo (APP), so it costs seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.llama_cpp import binaries
from core.llama_cpp.build_pause import claim_cores
from finetune.train import priority

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def copy(tmp_path, monkeypatch) -> Path:
    """A checkout's Makefile and requirements.txt with a venv whose set-up is done."""
    if not shutil.which("make") or not shutil.which("flock"):
        pytest.skip("needs make and flock (util-linux)")
    for name in ("Makefile", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    llama = venv / "llama.cpp"
    llama.mkdir()
    sdist = llama / "llama_cpp_python-0.3.36.tar.gz"  # LLAMA_VERSION in the Makefile
    sdist.touch()
    later = time.time() + 5
    for stamp in (venv / ".installed", llama / ".converters-0.3.36"):
        stamp.touch()
        os.utime(stamp, (later, later))  # newer than what they depend on: set-up is done
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(llama))
    monkeypatch.delenv(binaries.SERVER_ENV, raising=False)
    return tmp_path


def make_run(folder: Path, build: str | None = None, **extra: str) -> str:
    """``make run`` in ``folder``: a build that notes its niceness, group and session, then its
    start, and writes cmake-like lines."""
    starts = folder / "starts"
    build = build or (
        f"nice > {folder / 'niceness'}; "
        f"cat /proc/self/autogroup > {folder / 'group'}; "
        f'cut -d" " -f6 /proc/self/stat > {folder / "sid"}; '
        f"echo started >> {starts}; "  # last: once it is there, so are the files above
        "echo [ 42%] Building CXX object; sleep 3"
    )
    args = [
        "make",
        "--no-print-directory",
        "-C",
        str(folder),
        "run",
        f"VENV={folder / 'venv'}",
        f"LLAMA_BUILD_CMD={build}",
        # the copy's venv python is an empty file: the pauser runs on this one, from the checkout
        f"LLAMA_PAUSER={sys.executable} -m core.llama_cpp.build_pause --poll 0.1 "
        f"--dir {folder / 'venv' / 'llama.cpp'} --",
        "APP=echo app-started",
    ] + [f"{k}={v}" for k, v in extra.items()]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("app-started"), done.stdout  # the app starts either way
    return done.stdout


def count_starts(folder: Path, want: int, timeout: float = 10) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = (folder / "starts").read_text().count("started") if (folder / "starts").exists() else 0
        if n >= want:
            return n
        time.sleep(0.05)
    return n


def test_make_run_starts_the_build_once_and_again_after_it_ended(copy):
    said = make_run(copy)
    assert "building llama.cpp in the background" in said
    assert count_starts(copy, 1) == 1
    # the build yields the cores to the app and to training runs
    assert int((copy / "niceness").read_text()) == max(19, os.getpriority(os.PRIO_PROCESS, 0))
    assert int((copy / "sid").read_text()) != os.getsid(0)  # a session of its own
    if priority.session_niceness() is not None:  # whose group is niced too
        assert (copy / "group").read_text().split()[-1] == "19"
    deadline = time.time() + 5
    while binaries.build_progress() != "42%" and time.time() < deadline:
        time.sleep(0.05)
    assert binaries.building() and binaries.build_progress() == "42%"
    assert "being built, 42% done" in binaries.missing_reason()
    said = make_run(copy)  # while it builds
    assert "llama.cpp is being built in the background" in said
    time.sleep(0.5)
    assert count_starts(copy, 1) == 1
    deadline = time.time() + 10
    while binaries.building() and time.time() < deadline:
        time.sleep(0.1)
    assert not binaries.building()  # ended without llama-server: its log and lock file stay
    assert (copy / "venv" / "llama.cpp" / "build.lock").exists()
    assert "the last build stopped before it" in binaries.missing_reason()
    said = make_run(copy)
    assert "building llama.cpp in the background" in said and count_starts(copy, 2) == 2


def test_a_built_llama_cpp_is_not_built_again(copy):
    stamp = copy / "built-stamp"
    stamp.touch()
    said = make_run(copy, SERVER_STAMP=str(stamp))
    assert "llama.cpp" not in said
    time.sleep(0.5)
    assert not (copy / "starts").exists()


def test_the_background_build_waits_while_a_training_run_trains(copy):
    """make run's build under its pauser: a claim (what every training process holds) stops the
    build's processes; they go on when it ends."""
    ticks = copy / "ticks"
    make_run(copy, build=f"echo [ 42%] Building; while :; do echo . >> {ticks}; sleep 0.05; done")

    def count() -> int:
        return ticks.read_text().count(".") if ticks.exists() else 0

    def moving(within: float = 0.6) -> bool:
        before = count()
        time.sleep(within)
        return count() > before

    deadline = time.time() + 10
    while count() < 3 and time.time() < deadline:
        time.sleep(0.05)
    try:
        assert moving() and binaries.building()
        with claim_cores():
            deadline = time.time() + 10
            while not binaries.build_paused() and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # the mark follows the stop: give the stopped loop a moment to show
            assert not moving() and "waiting while a training run trains" in (
                binaries.missing_reason()
            )
        deadline = time.time() + 10
        while not moving(0.3) and time.time() < deadline:
            pass
        assert moving() and not binaries.build_paused()
    finally:
        subprocess.run(["pkill", "-f", str(ticks)], check=False)
