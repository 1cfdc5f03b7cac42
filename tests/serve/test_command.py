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
