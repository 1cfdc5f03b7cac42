"""``python -m bench llama-repack``: llama-server's decode speed with and without weight repacking.

One client, one request at a time, greedy, exactly ``--tokens`` tokens (``ignore_eos``), on the
default model's Q8_0 GGUF (or ``--gguf``), ``-t 2`` as on our 2-core machines (``--cpus 0,1``
pins it there on a bigger machine, through ``taskset``). Each setting runs ``--runs`` requests
on a fresh server; the first is a warm-up and not counted. The settings: the built llama-server
as llama.cpp repacks by default, the same with ``--no-repack`` (what TuneDesk started on every
AMX CPU before the start-up check), and any other binary named with ``--binary label=path``.
A server that crashes or stalls is reported as such: on AMX CPUs that is what the check is for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.serving import cpu_model
from core.llama_cpp.binaries import server_binary
from core.llama_cpp.process import free_port


def _ready(url: str, proc: subprocess.Popen, deadline: float) -> str:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with code {proc.returncode}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return ""
        except httpx.HTTPError:
            time.sleep(0.2)
    return "not ready in time (a hang)"


def decode_speeds(
    binary: Path,
    gguf: Path,
    extra: list[str],
    tokens: int,
    runs: int,
    cpus: str | None,
    log: Path,
    threads: tuple[int, int] = (2, 2),
) -> dict:
    """Tokens/s of each request on one fresh llama-server, or the reason it gave none
    (``threads``: its ``-t`` and ``-tb``)."""
    port = free_port()
    cmd = [
        str(binary),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        "1",
        "-c",
        "2048",
        "-t",
        str(threads[0]),
        "-tb",
        str(threads[1]),
        "--no-webui",
        *extra,
    ]
    proc = subprocess.Popen(
        (["taskset", "-c", cpus] if cpus else []) + cmd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        problem = _ready(url, proc, time.monotonic() + 60)
        if problem:
            return {"error": problem}
        speeds = []
        for _ in range(runs):
            body = {
                "prompt": "Hello, I need help with my order",
                "n_predict": tokens,
                "ignore_eos": True,
                "top_k": 1,
                "samplers": ["top_k"],
                "cache_prompt": False,
            }
            try:
                reply = (
                    httpx.post(f"{url}/completion", json=body, timeout=120)
                    .raise_for_status()
                    .json()
                )
            except httpx.HTTPError as error:
                return {
                    "error": f"request failed ({type(error).__name__}); exit code {proc.poll()}"
                }
            speeds.append(reply["timings"]["predicted_per_second"])
        return {"tok_s": speeds, "median": statistics.median(speeds[1:])}
    finally:
        proc.kill()
        proc.wait()


def default_gguf() -> Path:
    from adapters.export.gguf_cache import ensure_base_gguf
    from core import models

    return ensure_base_gguf(models.DEFAULT_MODEL, "q8_0")


def main(argv: list[str] | None = None) -> int:
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(
        prog="python -m bench llama-repack", description=__doc__.splitlines()[0]
    )
    parser.formatter_class = DefaultsFormatter  # each flag's default in --help
    parser.add_argument(
        "--gguf", type=Path, help="GGUF to decode (default: the default model at Q8_0)"
    )
    parser.add_argument(
        "--binary", action="append", default=[], help="label=path of another llama-server"
    )
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument(
        "--runs", type=int, default=4, help="requests per setting, the first not counted"
    )
    parser.add_argument("--cpus", help="taskset CPU list, e.g. 0,1")
    args = parser.parse_args(argv)
    built = server_binary()
    settings = [
        ("repack (llama.cpp's default)", built, []),
        ("--no-repack", built, ["--no-repack"]),
    ]
    settings = [s for s in settings if s[1] is not None]
    for spec in args.binary:
        label, _, path = spec.partition("=")
        settings.append((label, Path(path), []))
    if not settings:
        print("llama-server is not built (make llama) and no --binary was named")
        return 1
    gguf = args.gguf or default_gguf()
    print(
        f"CPU: {cpu_model()}; file: {gguf.name}; {args.tokens} tokens a request, one client, -t 2"
    )
    with tempfile.TemporaryDirectory(prefix="tunedesk-repack-") as logs:
        for i, (label, binary, extra) in enumerate(settings):
            result = decode_speeds(
                binary, gguf, extra, args.tokens, args.runs, args.cpus, Path(logs) / f"{i}.log"
            )
            print(json.dumps({"setting": label, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
