"""Calling the running app the way its browser page does: Gradio's queue over HTTP.

``gradio_client`` cannot send text that is not valid Unicode (httpx encodes the request
body as strict UTF-8), yet a JSON body may carry ``"\\ud800"`` and the app must answer it
with a sentence. So these calls post the JSON themselves (escaped, as ``json.dumps`` writes
it) to ``/gradio_api/queue/join`` and read the event stream, keeping what a user sees: the
outputs, the warning toasts (``gr.Warning``) and an error message. One object is one browser
tab: calls share a session, so a dropdown's choices set by one call hold for the next.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import httpx


@dataclass
class Reply:
    """What one event gave back: outputs, warning toasts, and the error text if it failed."""

    outputs: list | None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


class BrowserTab:
    """One session of the app at ``url`` (e.g. ``http://127.0.0.1:7860/``)."""

    def __init__(self, url: str, timeout: float = 300):
        self.url, self.timeout = url, timeout
        self.session = uuid.uuid4().hex[:12]
        config = httpx.get(f"{url}config", timeout=30).json()
        self._fn = {
            d["api_name"]: d.get("id", i)
            for i, d in enumerate(config["dependencies"])
            if d.get("api_name")
        }

    def call(self, api_name: str, *data) -> Reply:
        """Run the event named ``api_name`` with ``data`` as its inputs; wait for the end."""
        body = {
            "data": list(data),
            "fn_index": self._fn[api_name.lstrip("/")],
            "session_hash": self.session,
            "event_data": None,
            "trigger_id": None,
        }
        joined = httpx.post(
            f"{self.url}gradio_api/queue/join",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        joined.raise_for_status()
        reply = Reply(None)
        with httpx.stream(
            "GET",
            f"{self.url}gradio_api/queue/data",
            timeout=self.timeout,
            params={"session_hash": self.session},
        ) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "log" and msg.get("level") == "warning":
                    reply.warnings.append(msg["log"])
                elif msg.get("msg") == "unexpected_error":
                    reply.error = msg.get("message")
                    break
                elif msg.get("msg") == "process_completed":
                    out = msg.get("output") or {}
                    if msg.get("success"):
                        reply.outputs = out.get("data")
                    else:
                        reply.error = out.get("error") or "failed"
                    break
        return reply
