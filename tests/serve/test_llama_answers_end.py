"""A llama-server that stops sending mid-answer: the API's request ends in a 504 (OpenAI's
shape) within the idle bound, and so does Chat's ticket; against a stand-in upstream that sends
its headers and one token, then nothing (no llama-server binary needed)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from serve_helpers import api_app

from bench.local_server import serving
from inference.session import ModelSession
from serve.engines import Engines
from serve.interface.bounds import AnswerTimeout
from serve.llama_server.engine import LlamaServerEngine
from serve.llama_server.upstreams import Upstreams

BOUND_S = 2.0
MSGS = [{"role": "user", "content": "Where is my order?"}]


@contextlib.contextmanager
def stalling_upstream():
    """A stand-in llama-server: lists no LoRA; answers a completion with its headers and one
    token, then sends nothing until the test ends. Yields its URL."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._head("application/json", 2)
            self.wfile.write(b"[]")

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self._head("text/event-stream")
            self.wfile.write(b'data: {"content": "Hel", "tokens": [7]}\n\n')
            self.wfile.flush()
            release.wait(60)  # stuck: no token, no end, the connection kept open
            self.close_connection = True

        def _head(self, kind: str, length: int | None = None):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def engines(home, tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("TUNEDESK_ANSWER_IDLE_S", str(BOUND_S))
    monkeypatch.setattr(
        "core.llama_cpp.binaries.server_binary", lambda: "llama-server"
    )  # the stand-in serves
    with stalling_upstream() as url:
        session = ModelSession(str(tiny_llama_dir), dtype="float32")
        engine = LlamaServerEngine(
            session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=256
        )
        engines = Engines(session, "llama.cpp", llama_factory=lambda session, max_queue: engine)
        engines.prepare()
        assert engines.llama() is engine
        yield engines


@pytest.mark.parametrize("stream", [False, True])
def test_a_stalled_llama_server_answer_is_a_504_within_the_bound(engines, stream):
    body = {"model": "base", "messages": MSGS, "max_tokens": 16, "temperature": 0, "stream": stream}
    with serving(api_app(engines)) as url:
        start = time.perf_counter()
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
        waited = time.perf_counter() - start
    if stream:  # the headers went with the first token: the error comes in the stream
        events = [json.loads(x[6:]) for x in reply.text.splitlines() if x.startswith("data: {")]
        assert events[1]["choices"][0]["delta"]["content"] == "Hel"
        error = events[-1]["error"]
        assert reply.text.rstrip().endswith("data: [DONE]")
    else:
        assert reply.status_code == 504, reply.text
        error = reply.json()["error"]
    assert error["type"] == "timeout" and error["code"] == "answer_timeout"
    assert "no progress on this answer for 2 s" in error["message"]
    assert BOUND_S - 0.3 < waited < BOUND_S + 4
    assert engines.crowd() == {}  # the request let go of its engine


def test_a_stalled_llama_server_answer_ends_chats_ticket_within_the_bound(engines):
    ticket = engines.submit(MSGS, None)
    start = time.perf_counter()
    with pytest.raises(AnswerTimeout):
        ticket.text()
    assert BOUND_S - 0.3 < time.perf_counter() - start < BOUND_S + 3
    assert ticket.cancelled


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_read_timeout_first_is_still_the_answer_timeout(engines, stream, monkeypatch):
    """The relay's own read timeout and the API's idle clock run out together; when the read's
    fires first (forced here: it waits half the bound) the answer is the same 504, not a 502."""
    import serve.llama_server.engine as llama_engine

    monkeypatch.setattr(
        llama_engine, "read_bound", lambda: httpx.Timeout(600.0, connect=10.0, read=BOUND_S / 2)
    )
    body = {"model": "base", "messages": MSGS, "max_tokens": 16, "temperature": 0, "stream": stream}
    with serving(api_app(engines)) as url:
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    if stream:
        error = [json.loads(x[6:]) for x in reply.text.splitlines() if x.startswith("data: {")][-1][
            "error"
        ]
    else:
        assert reply.status_code == 504, reply.text
        error = reply.json()["error"]
    assert error["code"] == "answer_timeout" and "idle timeout" in error["message"], error
    ticket = engines.submit(MSGS, None)  # Chat's ticket too
    with pytest.raises(AnswerTimeout):
        ticket.text()
    assert engines.crowd() == {}
