"""Helpers for the reliability tests: the real app as a subprocess, driven over HTTP.

``start_app`` runs ``python app.py ...`` in its own home folder and writes the app's
stdout/stderr to ``<home>/app.log``, so tests can read (and grep) everything the app wrote.
Not a conftest.py: tests import helpers by module name (see tests/run_helpers.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/chat"  # ui/tabs/chat.py: the Send button's api_name
START_TRAINING = "/start_training"  # ui/tabs/train.py: the Start button's api_name
BASE = "base model (no adapter)"  # ui.views.state.BASE_LABEL, without importing the UI here


@dataclass
class AppProcess:
    """A running ``app.py``: where it listens, its process and its home folder."""

    url: str
    port: int
    proc: subprocess.Popen
    home: Path

    @property
    def log(self) -> Path:
        return self.home / "app.log"

    def memory_kib(self, field: str = "VmHWM") -> int:
        """A memory figure of the app process from /proc (VmHWM: peak resident set)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def listen_addresses(self) -> set[str]:
        """IPv4/IPv6 addresses with a socket listening on our port (from /proc/net/tcp*)."""
        found = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for row in Path(table).read_text().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                addr, port = local.split(":")
                if state == "0A" and int(port, 16) == self.port:  # 0A = LISTEN
                    found.add(_decode_addr(addr))
        return found


def _decode_addr(hex_addr: str) -> str:
    if len(hex_addr) == 8:  # IPv4, little-endian
        return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_addr)[::-1])
    raw = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, raw)


def clean_env() -> dict:
    """Our environment minus the app's own settings (a developer's shell may set them)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("TUNEDESK_", "GRADIO_SERVER"))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def start_app(
    model_dir: Path, home: Path, *args: str, env: dict | None = None, timeout: float = 120
):
    """Start ``app.py --port P --model model_dir *args`` and wait until it accepts connections."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = {
        **clean_env(),
        "TUNEDESK_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        **(env or {}),
    }
    cmd = [sys.executable, "app.py", "--port", str(port), "--model", str(model_dir), *args]
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    app = AppProcess(f"http://127.0.0.1:{port}/", port, proc, home)
    try:
        _wait_listening(app, timeout)
        yield app
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_listening(app: AppProcess, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", app.port), timeout=1):
                return
        except OSError:
            if app.proc.poll() is not None:
                pytest.fail("app exited: " + app.log.read_text(errors="replace")[-2000:])
            time.sleep(0.1)
    pytest.fail(
        f"app did not listen within {timeout:.0f} s: " + app.log.read_text(errors="replace")[-2000:]
    )


def chat_settings(max_new_tokens: int = 24) -> list:
    """The Chat tab's inputs after the message: adapter, system prompt, generation settings."""
    return [BASE, "You are a helpful customer-support assistant.", max_new_tokens, 0, 0.9, 1.0, 0]


def answer_text(result) -> str:
    """The assistant's text from /chat's (history, textbox) result."""
    history = result[0]
    assert history and history[-1]["role"] == "assistant", f"no answer in {history!r}"
    content = history[-1]["content"]
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def tiny_train_inputs(model_dir: Path, adapter_name: str, max_steps: int) -> list:
    """Inputs for the Train tab's Start (demo data) training ``model_dir`` briefly."""
    from ui.tabs.train import DATA_SOURCES
    from ui.views import forms

    cfg = forms.ui_defaults()
    cfg.model.name = str(model_dir)
    cfg.train.batch_size, cfg.train.max_steps, cfg.train.time_budget_s = 4, max_steps, 0
    cfg.lora.r, cfg.lora.alpha = 4, 8
    cfg.data.max_length, cfg.data.max_samples, cfg.data.val_fraction = 96, 64, 0.1
    cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = 0
    cfg.run.adapter_name = adapter_name
    return [DATA_SOURCES[0], None, "", *forms.form_values(cfg)]


def wait_for_run(home: Path, run_id: str, timeout: float = 180) -> dict:
    """Poll ``runs/<run_id>/status.json`` until the run is no longer active; return it."""
    import json

    status_file = home / "runs" / run_id / "status.json"
    deadline = time.time() + timeout
    status = {}
    while time.time() < deadline:
        if status_file.is_file():
            status = json.loads(status_file.read_text())
            if status.get("state") not in ("queued", "running", "stopping"):
                return status
        time.sleep(0.1)
    pytest.fail(f"run {run_id} still {status.get('state')} after {timeout:.0f} s")
