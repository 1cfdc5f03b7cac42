"""``python -m serve`` run as a user runs it: its own process on the shelf of a home,
driven by the official ``openai`` client (the clients benchmark starts it the same way)."""

from __future__ import annotations

import os
import subprocess
import sys

import openai
from serve_helpers import ADAPTERS

from bench.serving_api import answered_by, served_in_child
from inference.generate import GenerationSettings, compare

MSGS = [{"role": "user", "content": "Where is my order?"}]


def test_the_serve_command_answers_each_adapter_as_the_session_does(session, home, varied_dir):
    want = {m: compare(session, MSGS, [None if m == "base" else m], GenerationSettings(max_new_tokens=10))[0].text
            for m in ("base", *ADAPTERS)}
    with served_in_child(varied_dir, home, "pytorch", "float32", start_timeout=300) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        assert {m.id for m in client.models.list()} >= {str(varied_dir), *ADAPTERS}  # "base" names it too
        for model, text in want.items():
            got = client.chat.completions.create(model=model, messages=MSGS, temperature=0, max_tokens=10)
            assert got.choices[0].message.content == text, model
        assert answered_by(url) == "pytorch float32, batched"
    assert list(home.glob("serve-pytorch-float32-*.log"))  # the server's log stays beside the shelf


def test_the_serve_command_refuses_an_open_address_without_a_key(home):
    env = {**os.environ, "TUNEDESK_HOME": str(home), "TUNEDESK_API_KEY": ""}
    env.pop("TUNEDESK_API_KEY")
    done = subprocess.run([sys.executable, "-m", "serve", "--host", "0.0.0.0"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "without an API key" in done.stderr and "Traceback" not in done.stderr


def test_sigterm_stops_the_serve_command_within_seconds_with_an_answer_in_flight(home, varied_dir):
    """A long streamed answer is decoding when SIGTERM comes: the client gets an error in the
    stream (OpenAI's shape, then ``[DONE]``) and the process is gone within seconds (before
    issue 47 uvicorn waited for the answer, forever for a stuck one)."""
    import json
    import signal
    import time

    import httpx

    from bench.local_server import free_port

    port = free_port()
    env = {**os.environ, "TUNEDESK_HOME": str(home), "TUNEDESK_DTYPE": "float32"}
    argv = [sys.executable, "-m", "serve", "--port", str(port), "--model", str(varied_dir), "--engine", "pytorch"]
    with open(home.parent / "serve.log", "wb") as log:
        child = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url, lines = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.time() + 120
        while not _up(url):
            assert child.poll() is None and time.time() < deadline, (home.parent / "serve.log").read_text()[-2000:]
            time.sleep(0.3)
        body = {"model": "base", "messages": MSGS, "max_tokens": 2048, "min_tokens": 2048, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as reply:
            for line in filter(None, reply.iter_lines()):
                lines.append(line)
                if len(lines) == 4:  # a few tokens in: the answer is decoding
                    child.send_signal(signal.SIGTERM)
                    sent = time.perf_counter()
        child.wait(timeout=20)
        gone = time.perf_counter() - sent
    finally:
        if child.poll() is None:
            child.kill()
    assert gone < 8, gone
    errors = [json.loads(x[6:])["error"] for x in lines if x.startswith('data: {"error"')]
    assert len(errors) == 1 and "the server is stopping" in errors[0]["message"], lines[-3:]
    assert lines[-1] == "data: [DONE]"


def _up(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_serve_command_refuses_a_bad_answer_bound_in_a_sentence(home):
    env = {**os.environ, "TUNEDESK_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "serve", "--answer-idle-timeout", "0"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "the idle timeout must be a number of seconds above 0, got 0.0" in done.stderr
