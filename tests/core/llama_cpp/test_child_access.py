"""A llama-server child answers only to its own key, and a port taken between its choice and the
child's bind is found and another tried. Against a stand-in binary that binds and answers as
llama-server does (runs without the build), and against the real server where it is built."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from core.llama_cpp import process

# What the stand-in does of llama-server: bind --port (or log llama-server's bind failure and
# exit 1), refuse requests without LLAMA_API_KEY's key with 401 except /health, tell its
# model_path in /props.
STAND_IN = """#!{python}
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port, model = int(args[args.index("--port") + 1]), args[args.index("-m") + 1]
key = os.environ.get("LLAMA_API_KEY")

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health" and key and self.headers.get("Authorization") != "Bearer " + key:
            return self.answer(401, {{"error": {{"message": "Invalid API Key"}}}})
        self.answer(200, {{"model_path": model}} if self.path == "/props" else {{"status": "ok"}})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass

try:
    server = HTTPServer(("127.0.0.1", port), Handler)
except OSError:
    print("srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: %d" % port, flush=True)
    sys.exit(1)
server.serve_forever()
"""  # noqa: E501


@pytest.fixture
def stand_in(tmp_path) -> Path:
    binary = tmp_path / "llama-server"
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(0o755)
    return binary


@contextlib.contextmanager
def squatter():
    """Another process's server on a port: answers 200 to everything, as an unrelated or
    hostile listener may (so only the child's own answer can prove the port is ours). Yields
    (port, the paths it was asked)."""
    asked = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.path)
            data = json.dumps({"status": "ok", "model_path": "/not/yours.gguf"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, asked
    finally:
        server.shutdown()
        server.server_close()


def taken_first(monkeypatch, port: int) -> list[int]:
    """Make the next port choice return ``port`` (taken), later ones free ports; the choices."""
    chosen, real = [], process.free_port

    def choose() -> int:
        chosen.append(port if not chosen else real())
        return chosen[-1]

    monkeypatch.setattr(process, "free_port", choose)
    return chosen


def check_child(binary: Path, model: Path, tmp_path: Path, monkeypatch) -> None:
    with squatter() as (port, asked):
        chosen = taken_first(monkeypatch, port)
        server = process.LlamaServerProcess(
            binary, model, [], slots=1, ctx_per_slot=256, threads=1, log=tmp_path / "server.log"
        )
        with server:
            assert len(chosen) == 2 and server.port == chosen[1] != port  # retried on a new port
            assert "couldn't bind HTTP server socket" in (tmp_path / "server.log").read_text()
            assert asked  # the squatter answered in between; its 200 was not taken as the child's
            for path in ("/props", "/slots"):
                assert httpx.get(f"{server.url}{path}", timeout=10).status_code == 401
                assert (
                    httpx.get(
                        f"{server.url}{path}", headers={"Authorization": "Bearer guess"}, timeout=10
                    ).status_code
                    == 401
                )
                assert (
                    httpx.get(f"{server.url}{path}", headers=server.headers, timeout=10).status_code
                    == 200
                )
            assert server.api_key not in " ".join(server.command())  # ps does not show it


def test_the_child_answers_only_its_key_and_a_lost_port_is_retried(stand_in, tmp_path, monkeypatch):
    monkeypatch.setattr(process, "amx_cpu", lambda: False)  # no repack check: one launch per port
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    check_child(stand_in, model, tmp_path, monkeypatch)
    assert (
        process.LlamaServerProcess(stand_in, model, [], log=tmp_path / "l").api_key
        != process.LlamaServerProcess(stand_in, model, [], log=tmp_path / "l").api_key
    )  # one key each


def test_every_port_taken_is_a_sentence(stand_in, tmp_path, monkeypatch):
    monkeypatch.setattr(process, "amx_cpu", lambda: False)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        monkeypatch.setattr(process, "free_port", lambda: held.getsockname()[1])
        server = process.LlamaServerProcess(
            stand_in, tmp_path / "m.gguf", [], log=tmp_path / "server.log"
        )
        with pytest.raises(process.LlamaServerError, match="could not bind a port in 3 tries"):
            server.start(timeout=60)


def test_the_real_llama_server_answers_only_its_key_and_a_lost_port_is_retried(
    tmp_path, monkeypatch, default_model_dir
):
    from core.llama_cpp.binaries import missing_reason, server_binary

    binary = server_binary()
    if binary is None:
        pytest.skip(missing_reason())
    from llama_run import default_model_gguf

    check_child(binary, default_model_gguf(default_model_dir, tmp_path), tmp_path, monkeypatch)
