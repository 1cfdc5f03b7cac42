"""``python -m bench llama-threads``: llama-server's decode speed with one request's tokens on
every core or on one thread, alone and beside processes that keep cores busy.

What it answers: how fast Chat answers while a training run (which takes every core) goes on,
for each ``-t`` TuneDesk could start llama-server with (:func:`core.llama_cpp.process.
decode_threads_for`). Prompts keep every core (``-tb``) in each setting. One client, one request
at a time, greedy, exactly ``--tokens`` tokens, on the default model's Q8_0 GGUF (or ``--gguf``);
each setting on a fresh server, ``--runs`` requests, the first not counted. A busy neighbour is a
Python process spinning on one core (``--busy 0,1,2``: how many at once), started before the
server and stopped after it; ``--nice N`` runs the neighbours at that niceness, as a training run
started at a lower priority would be.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.llama_repack import decode_speeds, default_gguf
from bench.serving import cpu_model
from core.llama_cpp.binaries import server_binary
from inference.devices import physical_cores

SPIN = "while True: pass"


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
        for row in measure(
            binary, gguf, cores, busy, args.tokens, args.runs, Path(logs), args.nice
        ):
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
