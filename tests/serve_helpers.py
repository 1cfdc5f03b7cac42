"""Helpers for the serving tests: seeded adapters on a shelf, the API in a real HTTP server
(uvicorn in a thread) on a free port, a stand-in llama-server that answers with a tool call."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.local_server import free_port, serving  # noqa: F401 (the tests' import point)

ADAPTERS = ("a", "b", "c")


def put_adapters(
    home, model_dir, names=ADAPTERS, targets=("q_proj", "v_proj", "o_proj"), first_seed: int = 1
) -> None:
    """Seeded random LoRA adapters (large enough to change answers) with manifests."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from core import models

    weight_hash = models.resolve(str(model_dir)).weight_hash
    for seed, name in enumerate(names, start=first_seed):
        torch.manual_seed(seed)
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=list(targets), init_lora_weights=False
        )
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.3)
        model.save_pretrained(home / "adapters" / name)
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "base_model": {"name": str(model_dir), "weight_hash": weight_hash},
        }
        (home / "adapters" / name / "manifest.json").write_text(json.dumps(manifest))


def api_app(engines, api_key=None, feedback=None):
    from fastapi import FastAPI

    from serve.openai_api import OpenAIServer

    app = FastAPI()
    app.include_router(OpenAIServer(engines, api_key, feedback).router())
    return app


TRACK_ORDER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "track_order",
            "description": "Where an order is",
            "parameters": {
                "type": "object",
                "properties": {"order": {"type": "integer"}},
                "required": ["order"],
            },
        },
    }
]
TOOL_CALL_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "track_order", "arguments": '{"order": 12}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
}


def _tool_call_events() -> bytes:
    """:data:`TOOL_CALL_REPLY` as llama-server streams it: chunks of deltas, then [DONE]."""
    call = TOOL_CALL_REPLY["choices"][0]["message"]["tool_calls"][0]
    head = {k: TOOL_CALL_REPLY[k] for k in ("id", "created", "model")}
    start = {"index": 0, "id": call["id"], "type": "function"}
    deltas = [
        ({"role": "assistant", "content": None}, None),
        ({"tool_calls": [{**start, "function": {"name": "track_order", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"order"'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": ": 12}"}}]}, None),
        ({}, "tool_calls"),
    ]
    events = [
        {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        for delta, finish in deltas
    ]
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


@contextlib.contextmanager
def stand_in_llama_server():
    """A stand-in llama-server: lists no LoRA; hangs up on the next ``drops["left"]`` chat
    posts without a byte, answers the rest with a tool call (:data:`TOOL_CALL_REPLY`; asked to
    stream, as server-sent events: the call's name, then its arguments in two pieces), after
    holding each answer ``drops["hold_s"]`` seconds (a busy or stuck server; a client that
    hangs up meanwhile is counted in ``drops["hung_up"]``, and gets nothing). Yields
    (url, drops, the bodies it was sent)."""
    drops, seen = {"left": 0, "hold_s": 0.0, "hung_up": 0}, []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._send(b"[]")

        def do_POST(self):  # noqa: N802
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            if drops["left"] > 0:
                drops["left"] -= 1
                self.close_connection = True  # hang up without answering
                return
            if not self._held(drops["hold_s"]):
                drops["hung_up"] += 1
                self.close_connection = True
                return
            if seen[-1].get("stream"):
                self._send(_tool_call_events(), "text/event-stream")
                return
            self._send(json.dumps(TOOL_CALL_REPLY).encode())

        def _held(self, seconds: float) -> bool:
            """Wait ``seconds``; False as soon as the client has closed its connection."""
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                readable = select.select([self.connection], [], [], 0.05)[0]
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return False
            return True

        def _send(self, data: bytes, kind: str = "application/json"):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", drops, seen
    finally:
        server.shutdown()
        server.server_close()
