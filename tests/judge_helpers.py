"""A stand-in judge for the tests: a tiny OpenAI-shaped HTTP server on 127.0.0.1 only.

``FakeJudge(reply)`` answers every POST .../chat/completions with ``reply(request) -> (status,
body)``; it records each request's JSON. The replies below are the behaviours the judge code
must handle: good grades, prose, a body that is not JSON, a refusal of ``response_format``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GRADE_KEYS = ("addresses", "correct", "polite", "safe")


def completion(content: str) -> dict:
    """An OpenAI chat completion holding ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def answer_of(request: dict) -> str:
    """The answer the judge was asked to grade (the user message's last block)."""
    return request["messages"][-1]["content"].rpartition("Answer to grade:\n")[2]


def grades_by_word(word: str):
    """A judge that passes every item of answers containing ``word`` and fails the others."""

    def reply(request: dict):
        ok = int(word in answer_of(request))
        return 200, completion(json.dumps(dict.fromkeys(GRADE_KEYS, ok)))

    return reply


def prose(request: dict):
    """A judge that chats instead of grading."""
    return 200, completion("I think this answer is quite good overall, maybe a 7 out of 10.")


def not_json(request: dict):
    """Something at the URL that is not a chat-completions endpoint at all."""
    return 200, "<html><body>It works!</body></html>"


def no_schema(inner):
    """``inner``, behind an endpoint that refuses ``response_format`` with a 400."""

    def reply(request: dict):
        if "response_format" in request:
            return 400, {
                "error": {
                    "message": "response_format is not supported",
                    "type": "invalid_request_error",
                }
            }
        return inner(request)

    return reply


class FakeJudge:
    """The server; use as a context manager. ``url`` is its base URL (no /v1)."""

    def __init__(self, reply):
        self.reply, self.requests = reply, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                request = json.loads(
                    self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"
                )
                owner.requests.append({"path": self.path, **request})
                status, body = owner.reply(request)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "text/html" if isinstance(body, str) else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeJudge:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A local URL nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
