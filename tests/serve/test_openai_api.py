"""The OpenAI-compatible API driven by the official ``openai`` client and by ``curl``, over a
real HTTP server on the tiny model; answers checked against the session's own ``compare``."""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from serve_helpers import ADAPTERS, api_app, serving

from inference.generate import GenerationSettings, compare
from serve.engines import Engines

MSGS = [{"role": "user", "content": "Where is my order?"}]


def solo(session, adapter, max_tokens=12):
    """The answer the session gives alone (greedy, one generate call)."""
    return compare(session, MSGS, [adapter], GenerationSettings(max_new_tokens=max_tokens))[0]


@pytest.fixture
def url(session):
    with serving(api_app(Engines(session, "pytorch"))) as base_url:
        yield base_url


def client(url, key="unused"):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_models_lists_the_base_and_every_whole_adapter(url, session, home):
    (home / "adapters" / "broken").mkdir()  # no weights: not a model anyone can call
    cards = client(url).models.list().model_dump()["data"]
    ids = [m["id"] for m in cards]
    assert ids[:2] == [str(session.base_name), "base"] and sorted(ids[2:]) == sorted(ADAPTERS)
    assert cards[1]["tunedesk_base_model"] == str(session.base_name)  # "base" is that model
    got = client(url).chat.completions.create(
        model=ids[1], messages=MSGS, temperature=0, max_tokens=12
    )
    assert got.choices[0].message.content == solo(session, None).text


def test_answers_equal_the_sessions_own_and_carry_usage(url, session):
    for model, adapter in [("base", None), ("a", "a"), ("b", "b")]:
        want = solo(session, adapter)
        got = client(url).chat.completions.create(
            model=model, messages=MSGS, temperature=0, max_tokens=12
        )
        choice = got.choices[0]
        assert choice.message.content == want.text and choice.message.role == "assistant"
        assert choice.finish_reason == want.finish_reason
        assert got.usage.completion_tokens == want.tokens
        assert (
            got.usage.prompt_tokens > 0
            and got.usage.total_tokens == got.usage.prompt_tokens + want.tokens
        )
        assert got.system_fingerprint.startswith("pytorch") and got.model == model
    assert solo(session, "a").text != solo(session, None).text  # the adapter really answers


def test_streaming_chunks_add_up_to_the_answer(url, session):
    want = solo(session, "c")
    stream = client(url).chat.completions.create(
        model="c",
        messages=MSGS,
        temperature=0,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text == want.text and finishes == [want.finish_reason]
    assert chunks[-1].usage.completion_tokens == want.tokens and not chunks[-1].choices
    assert len({c.id for c in chunks}) == 1


def test_curl_streams_server_sent_events_and_posts_json(url, session):
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    body = json.dumps(
        {"model": "a", "messages": MSGS, "temperature": 0, "max_tokens": 12, "stream": True}
    )
    out = subprocess.run(
        [
            "curl",
            "-sN",
            f"{url}/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    events = [line[len("data: ") :] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        == solo(session, "a").text
    )
    body = json.dumps({"model": "base", "messages": MSGS, "temperature": 0, "max_tokens": 12})
    out = subprocess.run(
        [
            "curl",
            "-s",
            f"{url}/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out)["choices"][0]["message"]["content"] == solo(session, None).text


def test_stop_strings_cut_the_answer_before_them(url, session):
    want = solo(session, "a", max_tokens=24).text
    cut = want[len(want) // 2 : len(want) // 2 + 2]
    got = client(url).chat.completions.create(
        model="a", messages=MSGS, temperature=0, max_tokens=24, stop=[cut]
    )
    assert got.choices[0].message.content == want[: want.index(cut)]
    assert got.choices[0].finish_reason == "stop"


def test_errors_come_in_openais_shape_with_the_right_status(url):
    api = client(url)
    with pytest.raises(openai.NotFoundError) as err:
        api.chat.completions.create(model="nope", messages=MSGS)
    assert err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as err:
        api.chat.completions.create(model="a", messages=MSGS, temperature=5, max_tokens=0, top_p=0)
    message = err.value.body["message"]
    assert "temperature" in message and "max_tokens" in message and "top_p" in message
    assert err.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError, match="messages"):
        api.chat.completions.create(model="a", messages=[])
    with pytest.raises(openai.BadRequestError) as err:  # vLLM's min_tokens is checked too
        api.chat.completions.create(
            model="a", messages=MSGS, max_tokens=4, extra_body={"min_tokens": 9}
        )
    assert (
        err.value.body["param"] == "min_tokens"
        and "min_tokens must be" in err.value.body["message"]
    )
    with pytest.raises(openai.BadRequestError, match="n=1"):
        api.chat.completions.create(model="a", messages=MSGS, n=2)
    out = subprocess.run(
        ["curl", "-s", "-w", "\n%{http_code}", f"{url}/v1/chat/completions", "-d", "{not json"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    body, status = out.rsplit("\n", 1)
    assert status == "400" and "not valid JSON" in json.loads(body)["error"]["message"]


def test_a_full_queue_answers_503_busy(session):
    engines = Engines(session, "pytorch")
    engines.pytorch().max_queue = 0  # the shared scheduler's bound: nobody may wait
    with serving(api_app(engines)) as url, pytest.raises(openai.InternalServerError) as err:
        client(url).chat.completions.create(model="a", messages=MSGS, max_tokens=4)
    assert err.value.status_code == 503 and err.value.body["code"] == "server_busy"


def test_bearer_key_is_required_when_set(session):
    with serving(api_app(Engines(session, "pytorch"), api_key="s3cret")) as url:
        with pytest.raises(openai.AuthenticationError) as err:
            client(url, "wrong").models.list()
        assert err.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").chat.completions.create(model="a", messages=MSGS)
        assert len(client(url, "s3cret").models.list().data) == 2 + len(ADAPTERS)


def test_sixteen_concurrent_clients_over_three_adapters_get_their_solo_answers(url, session):
    models = ["base", *ADAPTERS] * 4
    want = {m: solo(session, None if m == "base" else m).text for m in set(models)}
    assert len(set(want.values())) == 4

    def ask(model):
        got = client(url).chat.completions.create(
            model=model, messages=MSGS, temperature=0, max_tokens=12, stream=model in ("a", "base")
        )
        if model in ("a", "base"):
            return model, "".join(c.choices[0].delta.content or "" for c in got if c.choices)
        return model, got.choices[0].message.content

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, models))
    assert [text for _, text in answers] == [want[m] for m, _ in answers]


def test_an_adapter_without_a_passed_gate_is_served_with_one_warning(url, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="tunedesk.serve")
    cards = {m["id"]: m for m in client(url).models.list().model_dump()["data"]}
    assert cards["a"]["tunedesk_release_gate"]["state"] == "not evaluated"
    for _ in range(2):
        got = client(url).chat.completions.create(model="a", messages=MSGS, max_tokens=2)
        assert got.choices[0].message.content is not None
    warned = [r.getMessage() for r in caplog.records if "serving anyway" in r.getMessage()]
    assert warned == [
        "serving anyway: adapter 'a' has not passed its release gate "
        "(not evaluated: no evaluation has checked its release gate yet)"
    ]
    # a recorded verdict: its card carries the support checks' floors with their figures
    from adapters.shelf.gate_rules import read_rules, record
    from adapters.shelf.store import Shelf

    shelf, figures = Shelf(), ["right-intent rate 0.93 (93/100 rows) reaches the floor 0.85"]
    record(
        shelf,
        "a",
        {"state": "passed", "reasons": [], "floors": figures, "rules": read_rules(shelf.path("a"))},
        {"eval_id": "e1", "date": "2026-11-27T00:00:00"},
    )
    cards = {m["id"]: m for m in client(url).models.list().model_dump()["data"]}
    assert cards["a"]["tunedesk_release_gate"] == {
        "state": "passed",
        "reasons": [],
        "floors": figures,
        "eval_id": "e1",
    }
    one = client(url).models.retrieve("a").model_dump()  # the card alone says the same
    assert one["tunedesk_release_gate"] == cards["a"]["tunedesk_release_gate"]
    assert "tunedesk_release_gate" not in client(url).models.retrieve("base").model_dump()


def test_feedback_on_an_answer_is_kept_per_version_and_bad_feedback_changes_nothing(session, home):
    import httpx

    from feedback.store import FeedbackStore

    store = FeedbackStore(log_conversations=True)
    asked = [{"role": "user", "content": "I am jo@example.com. Where is my order?"}]
    with serving(api_app(Engines(session, "pytorch"), api_key="k", feedback=store)) as url:
        answers = client(url, "k")
        plain = answers.chat.completions.create(
            model="a", messages=asked, max_tokens=6, temperature=0
        )
        streamed = list(
            answers.chat.completions.create(model="b", messages=MSGS, max_tokens=6, stream=True)
        )

        def send(body, key="k"):
            return httpx.post(
                f"{url}/v1/feedback",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )

        got = send(
            {
                "id": plain.id,
                "rating": "down",
                "correction": "Your order ships today.",
                "intent": " track_order ",
            }
        )
        assert got.status_code == 200, got.text
        assert got.json()["model"] == "a" and got.json()["conversation_logged"] is True
        assert got.json()["intent"] == "track_order"
        assert got.json()["version"] == Engines(session, "pytorch").weights_hash("a")
        assert send({"id": streamed[0].id, "rating": "up"}).status_code == 200
        before = store.ratings()
        for body, status, param in [
            ({"id": "chatcmpl-unknown", "rating": "up"}, 404, "id"),
            ({"id": plain.id, "rating": "great"}, 400, "rating"),
            ({"id": plain.id, "rating": "up", "correction": "x" * 9000}, 400, "correction"),
            ({"id": plain.id, "rating": "up", "user": "me"}, 400, "user"),
            ({"id": plain.id, "rating": "up", "intent": "x" * 200}, 400, "intent"),
            ({"id": plain.id, "rating": "up", "intent": ["a"]}, 400, "intent"),
            ({"rating": "up"}, 400, "id"),
            (["up"], 400, None),
        ]:
            reply = send(body)
            assert (reply.status_code, reply.json()["error"]["param"]) == (status, param), (
                reply.text
            )
        assert send({"id": plain.id, "rating": "up"}, key="wrong").status_code == 401
        bad = httpx.post(
            f"{url}/v1/feedback",
            content=b"{not json",
            timeout=30,
            headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        assert store.ratings() == before
    rows = store.ratings()
    assert [(r["adapter"], r["rating"], r["intent"]) for r in rows] == [
        ("a", "down", "track_order"),
        ("b", "up", None),
    ]
    assert rows[0]["messages"][0]["content"] == "I am [EMAIL]. Where is my order?"
    assert rows[0]["answer"] == plain.choices[0].message.content
    assert rows[1]["answer"] == "".join(
        c.choices[0].delta.content or "" for c in streamed if c.choices
    )
