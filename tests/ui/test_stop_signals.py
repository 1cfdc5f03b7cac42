"""ui/app.py's SIGTERM / Ctrl-C handler: the first signal stops the app (answers in flight end,
then Gradio's own stop), a second one while stopping is ignored, and neither waits on a lock the
interrupted main thread may hold (``make run`` killed as a process group gets SIGTERM twice, and
a second handler run inside the first's ``Event.set`` once hung the app for good)."""

from __future__ import annotations

import signal
import threading

import pytest

from ui import app


class Engines:
    """Stands in for serve.engines.Engines: its close takes a lock, as the real one does."""

    def __init__(self):
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def close(self) -> None:
        with self.lock:
            self.closed.set()


def test_the_handler_never_waits_on_the_lock_its_thread_holds(monkeypatch):
    installed: dict = {}
    monkeypatch.setattr(
        signal, "signal", lambda signum, handler: installed.update({signum: handler})
    )
    engines = Engines()
    app.stop_on_signals(engines)
    assert set(installed) == {signal.SIGTERM, signal.SIGINT}
    stop = installed[signal.SIGTERM]
    outcome: list = []

    def interrupted_main_thread():
        with engines.lock:  # as the main thread was, inside the engines' own lock
            try:
                stop(signal.SIGTERM, None)
            except KeyboardInterrupt:
                outcome.append("stopping")
            outcome.append(stop(signal.SIGTERM, None))  # the second SIGTERM: ignored
            outcome.append(installed[signal.SIGINT](signal.SIGINT, None))  # and a Ctrl-C

    worker = threading.Thread(target=interrupted_main_thread, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the handler waited on a lock its own thread held"
    assert outcome == ["stopping", None, None]
    assert engines.closed.wait(10)  # the answers in flight were ended, on another thread


def test_the_first_signal_stops_the_app():
    engines = Engines()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        app.stop_on_signals(engines)
        with pytest.raises(KeyboardInterrupt):
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert engines.closed.wait(10)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
