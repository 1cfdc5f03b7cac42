"""The OpenAI-compatible API served by the app's own server, beside the Gradio pages."""

from __future__ import annotations

import urllib.request

import openai
import pytest
from serve_helpers import ADAPTERS, free_port, put_adapters

from inference.generate import GenerationSettings, compare


@pytest.fixture
def running(home, varied_dir):
    from ui.app import build_app, launch
    from ui.views.state import AppState

    put_adapters(home, varied_dir)
    demo = build_app(state=AppState(str(varied_dir), serving="pytorch"))
    port = free_port()
    launch(demo, port=port, prevent_thread_lock=True, api_key="k-123", auth=("ana", "pw"))
    yield demo, f"http://127.0.0.1:{port}"
    demo.close()


def test_the_model_loads_at_launch_before_any_page_or_request(running):
    from run_helpers import wait_until

    demo, _ = running
    wait_until(lambda: demo.state.session._model is not None, "the model to load", timeout=120)


def test_api_answers_beside_the_pages_with_the_key(running):
    demo, url = running
    with urllib.request.urlopen(f"{url}/") as page:  # Gradio still serves its login page
        assert page.status == 200
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k-123", max_retries=0, timeout=120)
    assert sorted(m.id for m in client.models.list().data[2:]) == sorted(ADAPTERS)
    msgs = [{"role": "user", "content": "Where is my order?"}]
    got = client.chat.completions.create(model="b", messages=msgs, temperature=0, max_tokens=8)
    want = compare(demo.state.session, msgs, ["b"], GenerationSettings(max_new_tokens=8))[0]
    assert got.choices[0].message.content == want.text and got.system_fingerprint.startswith(
        "pytorch"
    )
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="pw-guess", max_retries=0).models.list()
    assert "pytorch" in demo.state.model_status_line()
