"""``python -m bench llama-threads``: llama-server's decode speed with one request's tokens on
every core or on one thread, alone and beside processes that keep cores busy.

What it answers: how fast Chat answers while a training run (which takes every core) goes on,
for each ``-t`` TuneDesk could start llama-server with (:func:`core.llama_cpp.process.
decode_threads_for`). Prompts keep every core (``-tb``) in each setting. One client, one request
at a time, greedy, exactly ``--tokens`` tokens, on the default model's Q8_0 GGUF (or ``--gguf``);
each setting on a fresh server, ``--runs`` requests, the first not counted. A busy neighbour is a
Python process spinning on one core (``--busy 0,1,2``: how many at once), started before the
server and stopped after it; ``--nice N`` runs the neighbours at that niceness, as a training run
started at a lower priority would be. ``--beside-training`` measures beside one real training run
instead (``python -m finetune train`` on the demo data with the default model, at the niceness
``--nice`` gives it through ``TUNEDESK_TRAIN_NICE``, in a session of its own as the Train tab
starts it), once its steps have begun.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.llama_repack import decode_speeds, default_gguf
from bench.serving import cpu_model
from core.llama_cpp.binaries import server_binary
from inference.devices import physical_cores

SPIN = "while True: pass"
DEMO_DATA = Path(__file__).resolve().parents[1] / "assets" / "demo_support.jsonl"
STEPS_BEGUN_S = 300.0  # a training run's first step comes well within this on 2 cores


def training_neighbour(folder: Path, nice: int) -> subprocess.Popen:
    """A real training run on the demo data, started and waited for until it steps.

    Raises:
        RuntimeError: it ended or did not step in :data:`STEPS_BEGUN_S` (with its log's tail).
    """
    from core.models import resolve

    events, log = folder / "events.jsonl", folder / "train.log"
    cmd = [
        sys.executable, "-m", "finetune", "train", "--model", str(resolve().path),
        "--data", str(DEMO_DATA), "--max-steps", "100000", "--name", "beside-bench",
        "--output-dir", str(folder / "out"), "--events", str(events), "--quiet",
    ]  # fmt: skip
    env = os.environ | {
        "TUNEDESK_TRAIN_NICE": str(nice),
        "TUNEDESK_HOME": str(folder / "home"),
        "OMP_WAIT_POLICY": "PASSIVE",
    }  # as the Train tab starts a run (finetune/train/runner.py): in a session of its own
    proc = subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + STEPS_BEGUN_S
    while time.monotonic() < deadline and proc.poll() is None:
        if events.exists() and '"progress"' in events.read_text():
            return proc
        time.sleep(1)
    proc.kill()
    proc.wait()
    tail = " | ".join(log.read_text(errors="replace").splitlines()[-3:])
    raise RuntimeError(f"the training neighbour did not step: {tail}")


def measure_beside_training(
    binary: Path, gguf: Path, cores: int, tokens: int, runs: int, logs: Path, nice: int
) -> list[dict]:
    """One row per decode threads, beside one real training run at niceness ``nice``."""
    trainer = training_neighbour(logs, nice)
    rows = []
    try:
        for decode in dict.fromkeys((cores, 1)):
            got = decode_speeds(
                binary, gguf, [], tokens, runs, None, logs / f"train-{decode}.log",
                threads=(decode, cores),
            )  # fmt: skip
            rows.append({"beside": "training", "train_nice": nice, "decode_threads": decode, **got})
    finally:
        trainer.kill()
        trainer.wait()
    return rows


def measure(
    binary: Path,
    gguf: Path,
    cores: int,
    busy: list[int],
    tokens: int,
    runs: int,
    logs: Path,
    nice: int = 0,
) -> list[dict]:
    """One row per (busy neighbours, decode threads): the median tokens/s or the error."""
    rows = []
    spin = (
        [sys.executable, "-c", SPIN]
        if nice == 0
        else ["nice", "-n", str(nice), sys.executable, "-c", SPIN]
    )
    for neighbours in busy:
        spinners = [subprocess.Popen(spin) for _ in range(neighbours)]
        try:
            for decode in dict.fromkeys((cores, 1)):
                got = decode_speeds(
                    binary, gguf, [], tokens, runs, None, logs / f"{neighbours}-{decode}.log",
                    threads=(decode, cores),
                )  # fmt: skip
                row = {"busy": neighbours, "decode_threads": decode, **got}
                rows.append(row | ({"neighbours_nice": nice} if neighbours and nice else {}))
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    return rows


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(
        prog="python -m bench llama-threads", description=__doc__.splitlines()[0]
    )
    parser.formatter_class = DefaultsFormatter  # each flag's default in --help
    parser.add_argument("--gguf", type=Path, help="GGUF to decode (default: the default model)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=4, help="requests a setting, first not counted")
    parser.add_argument("--busy", default="0,1,2", help="busy neighbours, each count in turn")
    parser.add_argument("--nice", type=int, default=0, help="the busy neighbours' niceness (0-19)")
    parser.add_argument(
        "--beside-training",
        action="store_true",
        help="beside one real training run instead of spinning neighbours",
    )
    args = parser.parse_args(argv)
    binary = server_binary()
    if binary is None:
        print("llama-server is not built (make llama)")
        return 1
    try:
        busy = [int(n) for n in args.busy.split(",")]
    except ValueError:
        parser.error(f"--busy takes whole numbers separated by commas, not {args.busy!r}")
    if not 0 <= args.nice <= 19:
        parser.error(f"--nice takes 0 to 19, not {args.nice}")
    gguf = args.gguf or default_gguf()
    cores = physical_cores()
    print(f"CPU: {cpu_model()}; {cores} cores; file: {gguf.name}; {args.tokens} tokens a request")
    with tempfile.TemporaryDirectory(prefix="tunedesk-threads-") as logs:
        if args.beside_training:
            rows = measure_beside_training(
                binary, gguf, cores, args.tokens, args.runs, Path(logs), args.nice
            )
        else:
            rows = measure(binary, gguf, cores, busy, args.tokens, args.runs, Path(logs), args.nice)
        for row in rows:
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
