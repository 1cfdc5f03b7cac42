"""A llama-server child never outlives the process that started it, however that one ends."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

SCRIPT = """
import sys, time
from pathlib import Path
from core.llama_cpp.process import LlamaServerProcess
server = LlamaServerProcess(Path(sys.argv[1]), Path(sys.argv[2]), [], slots=1, ctx_per_slot=256,
                            threads=1, log=Path(sys.argv[3])).start()
print(server.url, flush=True)
time.sleep(600)
"""


def _gone(url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=1)
        except httpx.HTTPError:
            return True
        time.sleep(0.2)
    return False


def test_the_server_stops_when_its_app_is_killed_or_stops_it(llama, tmp_path):
    model = llama.upstreams.all[0].process
    for ending in ("kill", "stop"):
        app = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SCRIPT,
                str(model.binary),
                str(model.model),
                str(tmp_path / f"{ending}.log"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        url = app.stdout.readline().strip()
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        app.kill() if ending == "kill" else app.terminate()  # no atexit runs either way
        app.wait(10)
        assert _gone(url, 5), f"llama-server outlived its app ({ending})"
