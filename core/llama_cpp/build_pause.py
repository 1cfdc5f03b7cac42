"""The background llama.cpp build waits while a training run trains.

``make run`` builds llama.cpp beside the app at the lowest priority, but on two cores a priority
does not keep a training run's steps whole: each time another process wakes, the build fills the
gap, and the Train tab's first run bought about half the steps it buys alone
(docs/benchmarks.md, "What a newcomer meets"). A time-budgeted run loses what the build takes,
while the build only ends later; so the build stops while a run trains.

Two halves meet in llama.cpp's tools folder (:func:`core.llama_cpp.binaries.tools_dir`):

- every training process holds a claim while it runs (:func:`claim_cores`): a file
  ``build-waits/<pid>-<start>`` naming it, removed when it ends;
- ``make run`` starts its build under :func:`main` (``python -m core.llama_cpp.build_pause --dir
  DIR -- COMMAND...``): the build's processes are a process group of their own, stopped
  (SIGSTOP) while a claim names a live process and continued (SIGCONT) once none does;
  ``build.paused`` names this process while they are stopped, so the Chat tab can say why the
  build does not move.

The build is never left stopped: a claim whose process is gone does not count (a killed run),
the pauser continues the build before it exits (the build's end, or SIGTERM / SIGINT, which it
passes on), and if the pauser itself is killed (SIGKILL) the kernel continues the group, which
is orphaned then (POSIX: an orphaned process group with a stopped member gets SIGHUP, then
SIGCONT): under ``make run``'s ``nohup`` SIGHUP is ignored and the build goes on; elsewhere it
ends, and its lock with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from core.activity import pid_alive, process_start
from core.llama_cpp.binaries import PAUSED_FILE, tools_dir

CLAIMS = "build-waits"
POLL_S = 1.0


def _claim_name(pid: int) -> str | None:
    """``<pid>-<start>``: names one process for good (a pid is reused, with its start it is not)."""
    start = process_start(pid)
    return None if start is None else f"{pid}-{start}"


@contextlib.contextmanager
def claim_cores(folder: Path | None = None) -> Iterator[Path | None]:
    """While the block runs, a build started by ``make run`` in ``folder`` (default
    :func:`tools_dir`) waits. Yields the claim's file, or None where the folder takes no writes
    (the block runs all the same)."""
    name = _claim_name(os.getpid())  # None without /proc: nothing could read the claim
    claim = (Path(folder) if folder else tools_dir()) / CLAIMS / name if name else None
    if claim is not None:
        try:
            claim.parent.mkdir(parents=True, exist_ok=True)
            claim.write_text(" ".join(sys.argv) + "\n")
        except OSError:
            claim = None
    try:
        yield claim
    finally:
        if claim is not None:
            claim.unlink(missing_ok=True)


def live_claims(folder: Path) -> list[int]:
    """The pids of the processes whose claims in ``folder`` are live; claims of processes that
    are gone (a run killed before it could remove its own) are removed."""
    live = []
    try:
        names = [p.name for p in (Path(folder) / CLAIMS).iterdir()]
    except OSError:
        return []
    for name in names:
        pid, _, start = name.partition("-")
        if pid.isdigit() and start.isdigit() and pid_alive(int(pid), int(start)):
            live.append(int(pid))
        else:
            with contextlib.suppress(OSError):
                (Path(folder) / CLAIMS / name).unlink()
    return sorted(live)


class Pauser:
    """Runs ``command`` as a process group of its own, stopped while ``folder`` holds live
    claims. :meth:`run` returns the command's exit code."""

    def __init__(self, command: list[str], folder: Path, poll_s: float = POLL_S):
        self.command, self.folder, self.poll_s = command, Path(folder), poll_s
        self.proc: subprocess.Popen | None = None
        self.stopped = False

    def _say(self, text: str) -> None:
        # Never a "[ NN%]" line: build_progress() reads the build's progress from those.
        print(f"tunedesk: {text}", flush=True)

    def _set_stopped(self, want: bool, why: str = "") -> None:
        if self.proc is None or want == self.stopped:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP if want else signal.SIGCONT)
        except ProcessLookupError:
            return
        self.stopped = want
        mark = self.folder / PAUSED_FILE
        if want:
            with contextlib.suppress(OSError):
                mark.write_text(f"{os.getpid()} {process_start(os.getpid())}\n")
            self._say(f"build paused {why}")
        else:
            with contextlib.suppress(OSError):
                mark.unlink(missing_ok=True)
            self._say("build goes on")

    def _pass_on(self, sig: int, _frame) -> None:
        self._set_stopped(False)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._pass_on)
        self.proc = subprocess.Popen(self.command, process_group=0)
        try:
            while True:
                try:
                    return self.proc.wait(timeout=self.poll_s)
                except subprocess.TimeoutExpired:
                    pass
                pids = live_claims(self.folder)
                self._set_stopped(
                    bool(pids), f"while a training run trains (pid {', '.join(map(str, pids))})"
                )
        finally:
            self._set_stopped(False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.llama_cpp.build_pause",
        description="Run a build that waits while a training run trains (claims in --dir).",
    )
    parser.add_argument("--dir", type=Path, default=None, help="llama.cpp's tools folder")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between looks")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the build command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the build command after --")
    print("tunedesk: the build waits whenever a training run trains", flush=True)
    return Pauser(command, args.dir or tools_dir(), args.poll).run()


if __name__ == "__main__":
    sys.exit(main())
