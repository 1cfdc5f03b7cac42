"""Shared pieces of the browser tests: Debian's Chromium, a free port, waiting for text."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
# How often a wait looks again: at 0.5 s each of the ~35 waits in the browser tests lost 0.25 s
# on average; a look is one inner_text (or connect) call, milliseconds.
POLL_S = 0.1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc, log: Path, timeout: float = 180) -> None:
    """Until the app listens on ``port``; fails with the log's tail if it exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if proc.poll() is not None:
                pytest.fail("app exited: " + log.read_text()[-2000:])
            time.sleep(POLL_S)
    pytest.fail(f"app did not listen on port {port} within {timeout:.0f} s")


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def drawn_lines(page, selector: str) -> list[str]:
    """The stroke colours of the lines a Vega plot inside ``selector`` really drew.

    A line counts when its SVG path joins at least two points and has a visible stroke;
    an axis-only plot (no data, or a colour scale that lost its series) gives [].
    """
    return page.eval_on_selector_all(
        f"{selector} g.mark-line path",
        """paths => paths.filter(p => (p.getAttribute('d') || '').includes('L'))
                        .map(p => p.getAttribute('stroke'))
                        .filter(s => s && s !== 'none' && s !== 'transparent')""",
    )


def bot_answer(page, chatbot: str = "#chatbot") -> str | None:
    """The raw text of the chatbot's last answer (Gradio puts it in the bot message's
    aria-label, before any markdown rendering), or None while the bot has said nothing."""
    found = page.locator(f'{chatbot} [data-testid="bot"]')
    if found.count() == 0:
        return None
    label = found.last.get_attribute("aria-label") or ""
    return label.removeprefix("bot's message: ")


def wait_answer(page, predicate, timeout: float = 120, chatbot: str = "#chatbot") -> str:
    """The chatbot's last answer once ``predicate`` accepts it (never the user's own message)."""
    deadline = time.time() + timeout
    answer = None
    while time.time() < deadline:
        answer = bot_answer(page, chatbot)
        if answer is not None and predicate(answer):
            return answer
        time.sleep(POLL_S)
    raise AssertionError(f"{chatbot}'s answer never matched; last answer: {str(answer)[:500]!r}")


def wait_text(page, selector: str, predicate, timeout: float = 120) -> str:
    """The inner text of ``selector`` once ``predicate`` accepts it."""
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.inner_text(selector)
        if predicate(text):
            return text
        time.sleep(POLL_S)
    raise AssertionError(f"{selector} never matched; last text: {text[:500]}")
