"""A build under the pauser stops while a training process holds a claim, goes on when none is
live, and is never left stopped: not by a killed run, not by a killed or stopped pauser.

The build is a real process tree (a shell whose child writes a tick every 20 ms); "stopped" is
read from the ticks and from /proc (state T), not from the pauser's word.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.llama_cpp import binaries
from core.llama_cpp.build_pause import CLAIMS, claim_cores, live_claims

ROOT = Path(__file__).resolve().parents[3]
TICKER = (
    'sh -c "echo \\$\\$ > ticker.pid; while :; do echo . >> ticks; sleep 0.02; done" & '
    "echo '[ 42%] Building CXX object'; wait"
)


@pytest.fixture
def folder(monkeypatch, tmp_path) -> Path:
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs Linux's /proc")
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path))
    monkeypatch.delenv(binaries.SERVER_ENV, raising=False)
    return tmp_path


def start_pauser(folder: Path, ignore_hangup: bool = False) -> subprocess.Popen:
    """The pauser over the ticking build, its output in build.log, as `make run` starts it."""
    cmd = [sys.executable, "-m", "core.llama_cpp.build_pause", "--dir", str(folder)]
    cmd += ["--poll", "0.1", "--", "sh", "-c", TICKER]
    if ignore_hangup:
        cmd = ["nohup", *cmd]  # as make run starts it
    proc = subprocess.Popen(
        cmd,
        cwd=folder,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        stdout=(folder / "build.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    wait_for(lambda: ticks(folder) > 3, "the build to tick")
    return proc


def ticks(folder: Path) -> int:
    try:
        return (folder / "ticks").read_text().count(".")
    except FileNotFoundError:
        return 0


def ticker_state(folder: Path) -> str | None:
    """The ticking process's state letter (R, S, T...), or None once it is gone."""
    pid = (folder / "ticker.pid").read_text().strip()
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def wait_for(check, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def ticking(folder: Path, within: float = 1.0) -> bool:
    before = ticks(folder)
    time.sleep(within)
    return ticks(folder) > before


def end(proc: subprocess.Popen, folder: Path) -> None:
    """The pauser and the build's whole group gone (the group is the pauser's child's own)."""
    proc.kill()
    proc.wait(timeout=10)
    try:
        group = os.getpgid(int((folder / "ticker.pid").read_text()))
    except (OSError, ValueError):
        return
    if group != os.getpgid(0):  # never this test's own group
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)


def test_a_claim_names_this_process_and_goes_with_the_block(folder):
    with claim_cores() as claim:
        assert claim is not None and claim.parent == folder / CLAIMS
        assert live_claims(folder) == [os.getpid()]
    assert not claim.exists() and live_claims(folder) == []


def test_a_claim_of_a_process_that_is_gone_does_not_count_and_is_removed(folder):
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(done.stdout)
    stale = folder / CLAIMS / f"{pid}-1"  # a killed run's leftover (start time 1: never live)
    stale.parent.mkdir()
    stale.touch()
    (folder / CLAIMS / "not-a-claim").touch()
    assert live_claims(folder) == []
    assert list((folder / CLAIMS).iterdir()) == []


def test_the_build_waits_while_a_run_trains_and_goes_on_after(folder):
    proc = start_pauser(folder)
    try:
        with open(folder / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # what make run's flock holds for the build
            assert ticking(folder) and not binaries.build_paused()
            with claim_cores():
                wait_for(lambda: ticker_state(folder) == "T", "the build to stop")
                assert not ticking(folder, 0.5)
                assert binaries.build_paused()
                assert "42% done, waiting while a training run trains" in (
                    binaries.missing_reason()
                )
            wait_for(lambda: ticker_state(folder) in ("R", "S"), "the build to go on")
            assert ticking(folder) and not binaries.build_paused()
            assert not (folder / binaries.PAUSED_FILE).exists()
        log = (folder / "build.log").read_text()
        assert "build paused while a training run trains" in log and "build goes on" in log
        assert binaries.build_progress() == "42%"  # the pauser's lines hide no progress
    finally:
        end(proc, folder)


def test_a_killed_run_does_not_leave_the_build_stopped(folder):
    proc = start_pauser(folder)
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from core.llama_cpp.build_pause import claim_cores\n"
            "with claim_cores(): print('claimed', flush=True); time.sleep(60)",
        ],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout.readline().strip() == "claimed"
        wait_for(lambda: ticker_state(folder) == "T", "the build to stop")
        run.kill()  # no chance to remove its claim
        run.wait()
        wait_for(lambda: ticker_state(folder) in ("R", "S"), "the build to go on")
        assert ticking(folder)
    finally:
        run.kill()
        end(proc, folder)


def test_a_killed_pauser_leaves_no_stopped_build(folder):
    """SIGKILL while the build is stopped: under nohup, as make run starts it, the kernel
    continues the orphaned group and the build goes on; the lock is never held by a stopped
    build."""
    proc = start_pauser(folder, ignore_hangup=True)
    try:
        with claim_cores():
            wait_for(lambda: ticker_state(folder) == "T", "the build to stop")
            proc.kill()
            proc.wait()
            wait_for(lambda: ticker_state(folder) in ("R", "S"), "the kernel to continue it")
            assert ticking(folder)
    finally:
        end(proc, folder)


def test_sigterm_to_the_pauser_ends_a_stopped_build(folder):
    proc = start_pauser(folder)
    try:
        with claim_cores():
            wait_for(lambda: ticker_state(folder) == "T", "the build to stop")
            proc.terminate()  # continued first, then passed on
            assert proc.wait(timeout=10) != 0
            wait_for(lambda: ticker_state(folder) is None, "the build to end")
    finally:
        end(proc, folder)
