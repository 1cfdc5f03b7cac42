"""``python -m bench train-beside-build``: the Train tab's first run alone, beside ``make run``'s
background llama.cpp build, and beside the same build when it waits for the run.

What it answers: how many seconds a training step takes while llama.cpp builds, as a newcomer
meets it (``make run`` builds in the background; the first click is Start training). Each mode
runs the Train tab's default settings (:func:`finetune.config.first_run_defaults` on the demo
data) for ``--steps`` fixed steps, with no time budget, validation, probes or saves, in a
session of its own as the Train tab starts it; the step time is the median of the steps after
the first two.

- ``alone``: nothing else runs;
- ``beside``: a real build of llama-server and llama-quantize (a fresh cmake build folder from
  the extracted source that ``make llama`` built from) started ``--lead`` seconds before, as
  ``make run`` starts it (its own session, nice 19, its autogroup at 19), without the pauser;
- ``waiting``: the same build under :mod:`core.llama_cpp.build_pause`, as ``make run`` starts it
  now: it stops while the run trains.

``--waker`` adds a third session at nice 0 that computes 10 ms of every 60 ms through every mode
(a stand-in for the browser tab and the app's polling, which wake the cores during a run). The
build folders and the run's claim live in a temporary folder: a build ``make run`` started
elsewhere is not paused by this benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.serving import cpu_model
from core.llama_cpp.binaries import tools_dir

DEMO_DATA = Path(__file__).resolve().parents[1] / "assets" / "demo_support.jsonl"
MODES = ("alone", "beside", "waiting")
WAKER = (
    "import time\n"
    "while True:\n"
    "    t = time.perf_counter()\n"
    "    while time.perf_counter() - t < 0.01: pass\n"
    "    time.sleep(0.05)\n"
)
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
]  # fmt: skip  # the Makefile's LLAMA_CMAKE_FLAGS


def run_config(folder: Path, steps: int) -> Path:
    """The Train tab's first run (its defaults on the demo data) for ``steps`` fixed steps."""
    from finetune.config import first_run_defaults

    cfg = first_run_defaults()
    cfg.data.path = str(DEMO_DATA)
    cfg.train.time_budget_s, cfg.train.max_steps, cfg.train.log_every = 0, steps, 1
    cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = 0
    cfg.run.adapter_name = f"beside-build-{folder.name}"
    cfg.run.run_dir = str(folder)
    cfg.save(folder / "config.json")
    return folder / "config.json"


def train(folder: Path, steps: int, llama_dir: Path) -> dict:
    """One run as the Train tab starts it; its step times from its progress events."""
    folder.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "finetune", "train", "--config", str(run_config(folder, steps)),
        "--events", str(folder / "events.jsonl"), "--quiet",
    ]  # fmt: skip
    env = os.environ | {
        "PYTHONUNBUFFERED": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "TUNEDESK_HOME": str(folder.parent / "home"),
        "TUNEDESK_LLAMA_CPP_DIR": str(llama_dir),  # its claim reaches this benchmark's build only
    }
    t0 = time.monotonic()
    with open(folder / "train.log", "wb") as log:
        code = subprocess.call(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    wall = time.monotonic() - t0
    if code != 0:
        tail = (folder / "train.log").read_text(errors="replace").splitlines()[-3:]
        raise RuntimeError(f"the run failed ({code}): {' | '.join(tail)}")
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    elapsed = [e["elapsed"] for e in events if e["type"] == "progress"]
    step_s = [b - a for a, b in zip(elapsed, elapsed[1:], strict=False)][1:]  # 2 warm up
    return {
        "steps": len(elapsed),
        "step_s": round(statistics.median(step_s), 2) if step_s else None,
        "wall_s": round(wall, 1),
    }


def in_own_session(cmd: list[str], log: Path, nice: int, **kwargs) -> subprocess.Popen:
    """``cmd`` in a session of its own at niceness ``nice``, its autogroup too (as make run)."""
    shell = f'echo {nice} > /proc/self/autogroup 2>/dev/null; exec "$@"'
    return subprocess.Popen(
        ["nice", "-n", str(nice), "sh", "-c", shell, "sh", *cmd],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **kwargs,
    )


def end_session(sid: int) -> None:
    """Every process of session ``sid`` continued and killed (the pauser's build is a process
    group of its own inside it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                os.kill(int(entry.name), signal.SIGCONT)
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def build_command(folder: Path) -> list[str]:
    """A fresh cmake build of llama-server and llama-quantize in ``folder`` from the extracted
    source (configured here), as ``make llama`` builds them."""
    source = tools_dir() / "src"
    subprocess.run(
        ["cmake", "-S", str(source), "-B", str(folder), *CMAKE_FLAGS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    cmd = ["cmake", "--build", str(folder), "--target", "llama-server", "llama-quantize"]
    return [*cmd, "-j", str(os.cpu_count() or 2)]


def start_build(work: Path, mode: str) -> subprocess.Popen:
    """The build of :func:`build_command` in a session of its own, under the pauser for
    ``waiting``."""
    cmd = build_command(work / f"build-{mode}")
    if mode == "waiting":
        cmd = [sys.executable, "-m", "core.llama_cpp.build_pause", "--dir", str(work), "--", *cmd]
    root = Path(__file__).resolve().parents[1]
    return in_own_session(cmd, work / f"build-{mode}.log", 19, cwd=root)


def missing_build_tool() -> str | None:
    """Why a real build cannot run here (no extracted source, no cmake), or None."""
    if not (tools_dir() / "src" / "CMakeLists.txt").is_file():
        return f"no extracted llama.cpp source in {tools_dir() / 'src'}: run `make llama` first"
    if shutil.which("cmake") is None:
        return "cmake is not installed"
    return None


def machine_line() -> tuple[str, bool]:
    """The CPU's model and whether it has avx512_bf16, printed as the benchmark's first line."""
    cpu = cpu_model()
    bf16 = "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    print(f"CPU: {cpu}; {os.cpu_count()} cores; avx512_bf16: {'yes' if bf16 else 'no'}")
    return cpu, bf16


def build_progress(log: Path) -> str:
    found = re.findall(r"\[\s*(\d{1,3})%\]", log.read_text(errors="replace"))
    return f"{found[-1]}%" if found else "0%"


def measure(mode: str, work: Path, steps: int, lead: float) -> dict:
    build = start_build(work, mode) if mode != "alone" else None
    try:
        if build is not None:
            time.sleep(lead)  # the build is compiling when the run starts, as after make run
            at_start = build_progress(work / f"build-{mode}.log")
        row = {"mode": mode, **train(work / f"run-{mode}", steps, work)}
        if build is not None:
            row["build"] = f"{at_start} -> {build_progress(work / f'build-{mode}.log')}"
        return row
    finally:
        if build is not None:
            end_session(build.pid)
            build.wait()


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(
        prog="python -m bench train-beside-build", description=__doc__.splitlines()[0]
    )
    parser.formatter_class = DefaultsFormatter
    parser.add_argument("--steps", type=int, default=10, help="fixed steps a run")
    parser.add_argument("--modes", default=",".join(MODES), help=f"any of {', '.join(MODES)}")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds the build runs first")
    parser.add_argument("--waker", action="store_true", help="a third session wakes the cores")
    parser.add_argument("--out", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in modes if m not in MODES]:
        parser.error(f"--modes takes {', '.join(MODES)}, not {', '.join(bad)}")
    if args.steps < 4:
        parser.error("--steps must be 4 or more (the first two are not timed)")
    if any(m != "alone" for m in modes) and (missing := missing_build_tool()):
        print(missing)
        return 1
    cpu, bf16 = machine_line()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tunedesk-beside-") as tmp:
        work = Path(tmp)
        waker = None
        if args.waker:
            waker = in_own_session([sys.executable, "-c", WAKER], work / "waker.log", 0)
        try:
            for mode in modes:
                row = measure(mode, work, args.steps, args.lead) | {"waker": args.waker}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            if waker is not None:
                end_session(waker.pid)
                waker.wait()
    if args.out:
        args.out.write_text(json.dumps({"cpu": cpu, "avx512_bf16": bf16, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
