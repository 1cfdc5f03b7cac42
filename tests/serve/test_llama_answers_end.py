"""A llama-server answer ends when it should: one that stops sending mid-answer ends in a 504
(OpenAI's shape) within the idle bound, and so does Chat's ticket; one whose client hangs up
mid-stream closes its upstream request at once. Against stand-in upstreams (no llama-server
binary needed): one that sends its headers and one token, then nothing; one that sends a
token every 20 ms until its connection is closed."""

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
def stalling_upstream(hung_up: threading.Event | None = None):
    """A stand-in llama-server: lists no LoRA; answers a completion with its headers and one
    token, then sends nothing until the test ends. Yields its URL.

    With ``hung_up``: sends a token every 20 ms instead, until a write finds the connection
    closed (``hung_up`` set then)."""
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
            if hung_up is None:
                release.wait(60)  # stuck: no token, no end, the connection kept open
            else:
                with contextlib.suppress(OSError):
                    while not release.wait(0.02):  # decoding until the relay closes the request
                        self.wfile.write(b'data: {"content": "lo", "tokens": [8]}\n\n')
                        self.wfile.flush()
                    return
                hung_up.set()
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


@contextlib.contextmanager
def engines_on(url: str, model_dir):
    """Engines whose llama.cpp engine relays to the stand-in at ``url``."""
    session = ModelSession(str(model_dir), dtype="float32")
    engine = LlamaServerEngine(
        session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=256
    )
    engines = Engines(session, "llama.cpp", llama_factory=lambda session, max_queue: engine)
    engines.prepare()
    assert engines.llama() is engine
    yield engines


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setenv("TUNEDESK_ANSWER_IDLE_S", str(BOUND_S))
    monkeypatch.setattr(
        "core.llama_cpp.binaries.server_binary", lambda: "llama-server"
    )  # the stand-in serves


@pytest.fixture
def engines(home, tiny_llama_dir, stand_in):
    with stalling_upstream() as url, engines_on(url, tiny_llama_dir) as engines:
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


def test_a_client_that_hangs_up_mid_stream_closes_the_upstream_request(
    home, tiny_llama_dir, stand_in
):
    """The read waiting on llama-server is cancelled in the relay's own task, so the upstream
    request closes with the client's (a read in a task of its own left it open and decoding)."""
    hung_up = threading.Event()
    body = {"model": "base", "messages": MSGS, "max_tokens": 200, "stream": True}
    with (
        stalling_upstream(hung_up) as upstream,
        engines_on(upstream, tiny_llama_dir) as engines,
        serving(api_app(engines)) as url,
    ):
        for attempt in range(3):  # the hang-up lands while the relay waits on a token
            hung_up.clear()
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as reply:
                assert reply.status_code == 200
                texts = (line for line in reply.iter_lines() if '"content": "lo"' in line)
                for _ in range(5):
                    next(texts)
            assert hung_up.wait(3), f"the upstream was still decoding 3 s on ({attempt})"
        deadline = time.monotonic() + 5
        while engines.crowd() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engines.crowd() == {}  # the hung-up answers let go of their engine
