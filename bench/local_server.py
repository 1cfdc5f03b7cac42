"""A FastAPI app served by uvicorn in a thread on a free local port (the clients benchmark
drives the real API through it; the tests do too)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app, start_timeout: float = 30.0):
    """Run ``app`` on 127.0.0.1:<free port>; yields its base URL, stops the server after.

    Raises:
        RuntimeError: the server did not start within ``start_timeout`` seconds.
    """
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="tunedesk-local-server")
    thread.start()
    deadline = time.time() + start_timeout
    while not server.started and time.time() < deadline and thread.is_alive():
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise RuntimeError(f"the local API server did not start on port {port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
