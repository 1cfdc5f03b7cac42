"""``python -m bench answer-beside-build``: Chat's PyTorch answers with ``make run``'s background
llama.cpp build stopped, and with it running beside them.

What it answers: how long a customer waits for an answer on the PyTorch engine while llama.cpp
builds (``make run`` builds in the background; Chat answers on PyTorch until it is built), and
so whether the build should stop for answers as it stops for a training run. One build of
llama-server and llama-quantize (a fresh cmake build folder from the extracted source, started
``--lead`` seconds before, in a session of its own niced 19 as ``make run`` starts it) runs
under :mod:`core.llama_cpp.build_pause`. A child process, in a session of its own at nice 0 as
the app runs, loads the default model as the app does (``dtype`` auto) and asks its batching
engine (the one Chat and Compare use on PyTorch) support questions one after another, greedy,
``--tokens`` tokens each, in ``--rounds`` rounds of one answer per mode, their order turned
each round so that the machine's changes over minutes fall on both modes alike:

- ``stopped``: the build is stopped before the answer starts (a claim held around it);
- ``beside``: the build runs beside the answer, niced.

Between two answers the pauser has ``SETTLE_S`` to see the claim come or go. A row gives a
mode's median seconds an answer took and its tokens a second; the first round warms up and is
not counted. ``--build`` times the answers beside another background command instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.train_beside_build import (
    build_command,
    build_progress,
    end_session,
    in_own_session,
    machine_line,
    missing_build_tool,
)
from core.llama_cpp.build_pause import claim_cores

MODES = ("stopped", "beside")
SETTLE_S = 2.5  # the pauser has seen a claim come or go (it looks every second)
QUESTIONS = [
    "Where is my order? I ordered a week ago and nothing has arrived.",
    "How do I change the shipping address on an order I placed yesterday?",
    "I was charged twice for the same purchase, can you help?",
    "How can I cancel my subscription?",
    "I want to return a pair of shoes that do not fit.",
    "My discount code does not work at checkout.",
]


def answer_times(model: str, rounds: int, tokens: int, claims: str) -> dict[str, dict]:
    """In this process: ``model`` served as Chat serves it on PyTorch, ``rounds`` + 1 rounds of
    one answer per mode (the first round not counted); ``claims`` is the pauser's folder."""
    from core.activity import training_active
    from inference.generate import GenerationSettings
    from inference.session import ModelSession
    from serve.batching.scheduler import Scheduler

    session = ModelSession(model, dtype="auto", cores_busy=training_active)
    settings = GenerationSettings(max_new_tokens=tokens, min_new_tokens=tokens)
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    with Scheduler(session) as engine:
        for i in range(rounds + 1):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
                with claim_cores(Path(claims)) if mode == "stopped" else contextlib.nullcontext():
                    time.sleep(SETTLE_S)  # the pauser has stopped the build, or continued it
                    start = time.perf_counter()
                    engine.submit(messages, None, settings).text()
                    seconds[mode].append(time.perf_counter() - start)
    time.sleep(SETTLE_S)  # the last claim gone: the build runs again before this process ends
    rows = {}
    for mode, times in seconds.items():
        median = statistics.median(times[1:])
        rows[mode] = {"answer_s": round(median, 3), "tok_s": round(tokens / median, 1)}
    return rows


def run(work: Path, build: list[str], model: str, rounds: int, tokens: int, lead: float) -> dict:
    """The build under the pauser (``work`` its folder), then the child's answers."""
    root = Path(__file__).resolve().parents[1]
    pauser = [sys.executable, "-m", "core.llama_cpp.build_pause", "--dir", str(work), "--"]
    background = in_own_session([*pauser, *build], work / "build.log", 19, cwd=root)
    try:
        time.sleep(lead)  # the build is compiling when the first question comes
        at_start = build_progress(work / "build.log")
        out = work / "answers.json"
        code = (
            "import json; from bench.answer_beside_build import answer_times; "
            f"json.dump(answer_times({model!r}, {rounds}, {tokens}, {str(work)!r}), "
            f"open({str(out)!r}, 'w'))"
        )
        child = in_own_session(
            [sys.executable, "-c", code], work / "answers.log", 0, cwd=root, env=dict(os.environ)
        )
        if child.wait() != 0:
            tail = (work / "answers.log").read_text(errors="replace").splitlines()[-3:]
            raise RuntimeError(f"the answers failed ({child.returncode}): {' | '.join(tail)}")
        found = json.loads(out.read_text())
        return found | {"build": f"{at_start} -> {build_progress(work / 'build.log')}"}
    finally:
        end_session(background.pid)
        background.wait()


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(
        prog="python -m bench answer-beside-build", description=__doc__.splitlines()[0]
    )
    parser.formatter_class = DefaultsFormatter
    parser.add_argument("--model", default="default", help="the base model served")
    parser.add_argument("--rounds", type=int, default=8, help="rounds timed (one answer a mode)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens in each answer")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds the build runs first")
    parser.add_argument("--build", help="another background command (default: llama.cpp's build)")
    parser.add_argument("--out", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.tokens < 1:
        parser.error("--rounds and --tokens must be 1 or more")
    if args.build is None and (missing := missing_build_tool()):
        print(missing)
        return 1
    cpu, bf16 = machine_line()
    with tempfile.TemporaryDirectory(prefix="tunedesk-answers-") as tmp:
        work = Path(tmp)
        build = shlex.split(args.build) if args.build else build_command(work / "build")
        found = run(work, build, args.model, args.rounds, args.tokens, args.lead)
    rows = [{"mode": mode, **found[mode]} for mode in MODES]
    for row in rows:
        print(json.dumps(row), flush=True)
    print(f"build: {found['build']}")
    if args.out:
        result = {"cpu": cpu, "avx512_bf16": bf16, "rows": rows, "build": found["build"]}
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
