"""``python -m serve`` run as a user runs it: its own process on the shelf of a home,
driven by the official ``openai`` client (the clients benchmark starts it the same way)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest
from serve_helpers import ADAPTERS

from bench.serving_api import answered_by, served_in_child
from inference.generate import GenerationSettings, compare

MSGS = [{"role": "user", "content": "Where is my order?"}]


def test_the_serve_command_answers_each_adapter_as_the_session_does_and_stops_on_sigterm(
    session, home, varied_dir
):
    """Then, with a long streamed answer in flight, SIGTERM: the client gets an error in the
    stream (OpenAI's shape, then ``[DONE]``) and the process is gone within seconds (before
    issue 47 uvicorn waited for the answer, forever for a stuck one)."""
    want = {
        m: compare(
            session, MSGS, [None if m == "base" else m], GenerationSettings(max_new_tokens=10)
        )[0].text
        for m in ("base", *ADAPTERS)
    }
    children: list = []
    with served_in_child(
        varied_dir, home, "pytorch", "float32", start_timeout=300, children=children
    ) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        assert {m.id for m in client.models.list()} >= {
            str(varied_dir),
            *ADAPTERS,
        }  # "base" names it too
        for model, text in want.items():
            got = client.chat.completions.create(
                model=model, messages=MSGS, temperature=0, max_tokens=10
            )
            assert got.choices[0].message.content == text, model
        assert answered_by(url) == "pytorch float32, batched"
        lines, gone = sigterm_mid_answer(url, children[0])
    logs = list(home.glob("serve-pytorch-float32-*.log"))  # the server's log stays beside the shelf
    port = url.rsplit(":", 1)[1]
    said = "serving the OpenAI-compatible API at http://127.0.0.1:" + port + "/v1 (open: "
    assert len(logs) == 1 and said in logs[0].read_text(), "no line says where it listens"
    assert gone < 8, gone
    errors = [json.loads(x[6:])["error"] for x in lines if x.startswith('data: {"error"')]
    assert len(errors) == 1 and errors[0]["code"] == "server_stopping", lines[-3:]
    assert "the server is stopping" in errors[0]["message"] and lines[-1] == "data: [DONE]"


def sigterm_mid_answer(url: str, child) -> tuple[list[str], float]:
    """Stream a 2048-token answer, SIGTERM ``child`` a few chunks in; (the stream's lines, the
    seconds from SIGTERM until the process was gone)."""
    body = {
        "model": "base",
        "messages": MSGS,
        "max_tokens": 2048,
        "min_tokens": 2048,
        "stream": True,
    }
    lines, sent = [], None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as reply:
        for line in filter(None, reply.iter_lines()):
            lines.append(line)
            if len(lines) == 4:  # a few tokens in: the answer is decoding
                child.send_signal(signal.SIGTERM)
                sent = time.perf_counter()
    child.wait(timeout=20)
    return lines, time.perf_counter() - sent


def test_the_serve_command_refuses_an_open_address_without_a_key(home):
    env = {**os.environ, "TUNEDESK_HOME": str(home), "TUNEDESK_API_KEY": ""}
    env.pop("TUNEDESK_API_KEY")
    done = subprocess.run(
        [sys.executable, "-m", "serve", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        done.returncode == 2
        and "without an API key" in done.stderr
        and "Traceback" not in done.stderr
    )


def test_the_serve_command_refuses_a_bad_answer_bound_in_a_sentence(home):
    env = {**os.environ, "TUNEDESK_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "serve", "--answer-idle-timeout", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "the idle timeout must be a number of seconds above 0, got 0.0" in done.stderr


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--port", "99999"], "must be a port from 1 to 65535, not '99999'"),
        (["--port", "-1"], "must be a port from 1 to 65535, not '-1'"),
        (["--model", "nonexistent/xyz"], "Could not load base model 'nonexistent/xyz'"),
    ],
)
def test_the_serve_command_refuses_a_bad_port_or_model_before_it_listens(home, argv, said):
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "serve", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_serve_command_refuses_a_short_single_key_without_showing_it(home, how):
    """The scoped keys' 8-character minimum holds for --api-key / TUNEDESK_API_KEY too."""
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    argv = ["--api-key", "pa55w"] if how == "flag" else []
    if how == "env":
        env["TUNEDESK_API_KEY"] = "pa55w"
    done = subprocess.run(
        [sys.executable, "-m", "serve", *argv], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "TUNEDESK_API_KEY: the key (--api-key) is shorter than 8 characters" in done.stderr
    assert "pa55w" not in done.stderr + done.stdout


def test_the_serve_command_refuses_an_address_it_cannot_listen_on_before_loading(home):
    """A host that is no address here failed in uvicorn after the model had loaded ('ERROR:
    [Errno -2] Name or service not known', exit 3); a port in use likewise; a --home it cannot
    make said "[Errno 20] Not a directory: '...'"."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env["TUNEDESK_API_KEY"] = "k" * 32
    a_file = home.parent / "a-file"
    a_file.write_text("")
    cases = {
        ("--home", f"{a_file}/home"): f"error: --home {a_file}/home cannot hold TuneDesk's "
        "data (Not a directory); name a folder this user can write (it is made when missing)",
        ("--host", "no-such-host.invalid"): "error: --host 'no-such-host.invalid' is not an "
        "address of this machine (",
        ("--host", "192.0.2.10"): "error: cannot listen on 192.0.2.10:8000 (Cannot assign "
        "requested address); give --host an address of this machine (127.0.0.1, 0.0.0.0) or "
        "another --port",
        ("--port", str(port)): f"error: --port {port} is in use on 127.0.0.1: another server "
        "listens there; stop it or give another --port",
    }
    with taken:
        for argv, said in cases.items():
            done = subprocess.run(
                [sys.executable, "-m", "serve", *argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 2 and done.stderr.startswith(said), (argv, done.stderr)
            assert len(done.stderr.splitlines()) == 1 and not done.stdout, argv  # nothing loaded


def test_the_line_says_where_it_listens_and_who_may_call():
    """The line ``python -m serve`` prints once it listens (the command's own test above reads
    it in the server's log)."""
    from serve.flags import listening_line
    from serve.keys import KeyRing

    port = 8123
    line = listening_line("serving the API", "127.0.0.1", port, KeyRing())
    assert (
        line == f"serving the API at http://127.0.0.1:{port}/v1 (open: no API key asked "
        "(this machine only))"
    )
    keyed = KeyRing({"web": "k" * 16, "app": "j" * 16}, {"ana": "a" * 16})
    assert listening_line("serving", "::1", 8000, keyed) == (
        "serving at http://[::1]:8000/v1 (keyed: 2 chat and 1 admin key(s) "
        "(TUNEDESK_CHAT_KEYS, TUNEDESK_ADMIN_KEYS, --api-key))"
    )
    closed = listening_line("serving", "0.0.0.0", 80, KeyRing(closed=True))
    assert closed.endswith(
        "(closed: no API key set, every request refused until TUNEDESK_CHAT_KEYS is)"
    )
