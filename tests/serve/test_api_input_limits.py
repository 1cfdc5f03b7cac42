"""The API's input handling as a careless or hostile client meets it, over raw HTTP and the
openai client: huge and deep bodies, loosely typed fields, lone surrogates, hang-ups. Every
refusal is a 4xx in OpenAI's error shape naming the field, within a second, and nothing grows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest
from serve_helpers import api_app, serving

from serve.engines import Engines
from serve.openai_api import MAX_BODY_BYTES

MSGS = [{"role": "user", "content": "Where is my order?"}]
TOOLS = [{"type": "function", "function": {"name": "track", "parameters": {"type": "object"}}}]
TOOL_RESULT = {"role": "tool", "content": '{"status": "shipped"}', "tool_call_id": "call_1"}


@pytest.fixture
def url(session):
    with serving(api_app(Engines(session, "pytorch"))) as base_url:
        yield base_url


def _rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return (
        int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        / 1024
    )


def _nested(levels: int):
    value = 1
    for _ in range(levels):
        value = [value]
    return value


def _post(url, body, headers=None):
    start = time.perf_counter()
    got = httpx.post(
        f"{url}/v1/chat/completions",
        content=body,
        timeout=30,
        headers=headers or {"Content-Type": "application/json"},
    )
    return got, time.perf_counter() - start


def test_a_huge_body_is_refused_413_before_it_is_read_whole(url):
    head, tail = b'{"model": "base", "messages": [{"role": "user", "content": "', b'"}]}'

    def chunks():  # 64 MiB made as it is sent: the client itself holds little
        yield head
        for _ in range(64):
            yield b"y" * (1 << 20)
        yield tail

    before = _rss_mib()
    for headers in (
        {"Content-Length": str(len(head) + (64 << 20) + len(tail))},
        {},
    ):  # declared, then chunked
        got, seconds = _post(url, chunks(), headers={"Content-Type": "application/json", **headers})
        assert got.status_code == 413 and seconds < 1.0, (headers, seconds)
        assert got.json()["error"]["code"] == "request_too_large"
    assert _rss_mib() - before < 4 * MAX_BODY_BYTES / 2**20 + 16  # the limit, not the body
    huge = json.dumps(
        {"model": "base", "messages": [{"role": "user", "content": "x" * (64 << 20)}]}
    )
    got, seconds = _post(url, huge)
    assert got.status_code == 413 and seconds < 1.0
    small, seconds = _post(url, json.dumps({"model": "base", "messages": MSGS, "max_tokens": 2}))
    assert small.status_code == 200 and seconds < 30


@pytest.mark.parametrize(
    "body, param, words",
    [
        ("[" * 100_000 + "]" * 100_000, None, "nested deeper"),
        (
            json.dumps({"model": "base", "messages": MSGS, "metadata": {"a": _nested(40)}}),
            None,
            "nested deeper",
        ),
        (
            '{"model": "base", "messages": [{"role": "user", "content": "hi \\ud800"}]}',
            "messages[0].content",
            "not valid Unicode",
        ),
        (
            '{"model": "base", "messages": [{"role": "user", "content": "hi", "name": "\\udfff"}]}',
            "messages[0].name",
            "not valid Unicode",
        ),
        (
            '{"model": "base", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type":'
            ' "function", "function": {"name": "t\\udfff", "parameters": {"type": "object"}}}]}',
            "tools[0]",
            "not valid Unicode",
        ),
        (  # the docs: every text must be valid Unicode; user keys an alias's conversation
            '{"model": "base", "messages": [{"role": "user", "content": "hi"}], '
            '"user": "u\\ud800"}',
            "user",
            "user contains a character that is not valid Unicode",
        ),
        (json.dumps({"model": "base", "messages": MSGS, "n": True}), "n", "n=1"),
        (
            json.dumps(
                {"model": "base", "messages": MSGS, "stream_options": {"include_usage": "yes"}}
            ),
            "stream_options.include_usage",
            "true or false",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "frequency_penalty": "x"}),
            "frequency_penalty",
            "number from -2 to 2",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "presence_penalty": 5}),
            "presence_penalty",
            "number from -2 to 2",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "presence_penalty": 0.5}),
            "presence_penalty",
            "not supported",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "response_format": {"type": "xml"}}),
            "response_format",
            "json_schema",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "tools": [{"type": "function"}]}),
            "tools",
            "function",
        ),
        (
            json.dumps({"model": "base", "messages": MSGS, "temperature": True}),
            "temperature",
            "temperature",
        ),
        (  # a call asked for with nothing to call: it cannot be honoured
            json.dumps({"model": "base", "messages": MSGS, "tool_choice": "required"}),
            "tool_choice",
            "'tool_choice' asks for a tool call, but the request offers no 'tools'",
        ),
        (
            json.dumps(
                {
                    "model": "base",
                    "messages": MSGS,
                    "tools": [],
                    "tool_choice": {"type": "function", "function": {"name": "track"}},
                }
            ),
            "tool_choice",
            "offers no 'tools'",
        ),
        (  # named as the request names it, not GenerationSettings' max_new_tokens
            json.dumps({"model": "base", "messages": MSGS, "max_tokens": 4, "min_tokens": 9}),
            "min_tokens",
            "min_tokens must be from 0 to max_tokens, got 9",
        ),
        (  # OpenAI answers it; the chat template has no turn to answer
            json.dumps({"model": "base", "messages": [{"role": "system", "content": "Be kind."}]}),
            "messages",
            "the last message must be the user's, not a system message",
        ),
        (
            json.dumps(
                {"model": "base", "messages": [*MSGS, {"role": "developer", "content": "x"}]}
            ),
            "messages",
            "the last message must be the user's, not a system message",
        ),
        (  # a tool's result only a tools chat relayed to llama.cpp reads
            json.dumps({"model": "base", "messages": [*MSGS, TOOL_RESULT]}),
            "messages[1].role",
            "messages[1] is a tool's result (role 'tool'), which only a chat offering 'tools'",
        ),
        (  # PyTorch answers a tools chat in text: a tool's result it cannot render
            json.dumps({"model": "base", "messages": [*MSGS, TOOL_RESULT], "tools": TOOLS}),
            "messages[1].role",
            "answered by llama.cpp reads",
        ),
    ],
)
def test_bad_fields_get_a_400_naming_them_within_a_second(url, body, param, words):
    got, seconds = _post(url, body)
    error = got.json()["error"]
    assert got.status_code == 400 and seconds < 1.0, error
    assert (
        error["param"] == param
        and words in error["message"]
        and error["type"] == "invalid_request_error"
    )


def test_the_openai_client_meets_the_same_refusals(url):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError, match="n=1"):
        client.chat.completions.create(model="base", messages=MSGS, n=2)
    with pytest.raises(openai.BadRequestError, match="llama.cpp engine") as err:
        client.chat.completions.create(
            model="base",
            messages=MSGS,
            max_tokens=4,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object"}},
            },
        )
    assert err.value.body["param"] == "response_format"
    offered = [
        {"type": "function", "function": {"name": "track", "parameters": {"type": "object"}}}
    ]
    text = client.chat.completions.create(model="base", messages=MSGS, tools=offered, max_tokens=4)
    assert text.choices[0].message.content  # PyTorch answers in text; never a 400 for tools


def test_a_client_that_hangs_up_stops_the_answer(url, session):
    from serve.batching.scheduler import shared_scheduler

    body = {
        "model": "base",
        "messages": MSGS,
        "stream": True,
        "max_tokens": 2000,
        "min_tokens": 2000,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        for _ in response.iter_lines():
            break  # the first chunk came: decoding has begun; now hang up
    scheduler, deadline = shared_scheduler(session), time.monotonic() + 5
    while (
        sum(scheduler.status()[k] for k in ("running", "waiting")) and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert scheduler.status()["running"] == scheduler.status()["waiting"] == 0


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force(url):
    got, _ = _post(
        url,
        json.dumps(
            {"model": "base", "messages": MSGS, "max_completion_tokens": None, "max_tokens": 3}
        ),
    )
    assert got.status_code == 200, got.text
    assert got.json()["usage"]["completion_tokens"] <= 3


def test_keyless_ratings_are_one_vote_per_answer_whatever_bearer_is_made_up(session, home):
    from feedback.store import FeedbackStore

    store = FeedbackStore()
    with serving(api_app(Engines(session, "pytorch"), feedback=store)) as base_url:
        asked = {"model": "base", "messages": MSGS, "max_tokens": 2}
        answer, _ = _post(base_url, json.dumps(asked))
        for i in range(10):
            rated = httpx.post(
                f"{base_url}/v1/feedback",
                json={"id": answer.json()["id"], "rating": "down" if i % 2 else "up"},
                headers={"Authorization": f"Bearer made-up-{i}"},
                timeout=30,
            )
            assert rated.status_code == 200, rated.text
    assert [r["rating"] for r in store.ratings()] == ["down"]  # the last vote, replacing the rest


def test_a_thumb_sent_again_keeps_the_reviewers_accepted_correction(session, home, capsys):
    from feedback.__main__ import main as feedback_cli
    from feedback.store import FeedbackStore

    store = FeedbackStore(log_conversations=True)
    with serving(api_app(Engines(session, "pytorch"), feedback=store)) as base_url:
        asked = {"model": "base", "messages": MSGS, "max_tokens": 2}
        answer, _ = _post(base_url, json.dumps(asked))
        vote = {"id": answer.json()["id"], "rating": "down"}
        rated = httpx.post(
            f"{base_url}/v1/feedback",
            json={**vote, "correction": "Cancel it", "intent": "cancel_order"},
            timeout=30,
        )
        assert rated.status_code == 200, rated.text
        fix = ["--correction", "I have cancelled your order.", "--intent", "cancel_order"]
        assert feedback_cli(["review", rated.json()["id"], "--accept", *fix]) == 0
        again = httpx.post(f"{base_url}/v1/feedback", json=vote, timeout=30)  # the widget again
    assert again.status_code == 200, again.text
    assert again.json()["intent"] == "cancel_order" and again.json()["correction"] is True
    (row,) = store.ratings()
    assert (row["status"], row["correction"], row["intent"]) == (
        "accepted",
        "I have cancelled your order.",
        "cancel_order",
    )


def test_a_lone_surrogate_in_a_ratings_correction_or_intent_is_a_400_naming_it(session, home):
    from feedback.store import FeedbackStore

    store = FeedbackStore()
    with serving(api_app(Engines(session, "pytorch"), feedback=store)) as base_url:
        asked = {"model": "base", "messages": MSGS, "max_tokens": 2}
        answer_id = _post(base_url, json.dumps(asked))[0].json()["id"]
        for field in ("correction", "intent"):
            got = httpx.post(
                f"{base_url}/v1/feedback",
                content=f'{{"id": "{answer_id}", "rating": "down", "{field}": "ok \\ud800"}}',
                headers={"Content-Type": "application/json"},
                timeout=30,
            )
            assert got.status_code == 400, got.text
            error = got.json()["error"]
            assert error["param"] == field and error["type"] == "invalid_request_error"
            assert error["message"].startswith(f"{field} contains a character that is not valid")
    assert store.ratings() == []


def test_unknown_routes_and_methods_answer_in_openai_shape(url):
    for method, path, status, code, words in [
        ("GET", "/v1/nothing/here", 404, "not_found", "no route /v1/nothing/here"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed", "it takes POST"),
        ("DELETE", "/v1/models", 405, "method_not_allowed", "it takes GET"),
    ]:
        got = httpx.request(method, f"{url}{path}", timeout=30)
        error = got.json()["error"]
        assert got.status_code == status, got.text
        assert error["code"] == code and words in error["message"]
        assert error["type"] == "invalid_request_error"
    still = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "base", "messages": MSGS, "max_tokens": 2},
        timeout=60,
    )
    assert still.status_code == 200 and httpx.get(f"{url}/v1/models", timeout=30).status_code == 200


def test_an_answer_ends_at_the_models_positions_as_on_llama_cpp(url):
    """max_tokens past what the model reads after the prompt: the answer ends there, 'length',
    as llama-server's slot ends it; PyTorch went on past the model's 256 positions."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
    for stream in (False, True):
        asked = {"model": "base", "messages": MSGS, "max_tokens": 2048, "temperature": 0}
        if stream:
            chunks = list(
                client.chat.completions.create(
                    **asked,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"min_tokens": 2048},  # never its end of turn: the full length
                )
            )
            used = chunks[-1].usage
            finish = next(
                c.choices[0].finish_reason
                for c in chunks
                if c.choices and c.choices[0].finish_reason
            )
        else:
            got = client.chat.completions.create(**asked, extra_body={"min_tokens": 2048})
            used, finish = got.usage, got.choices[0].finish_reason
        assert (used.prompt_tokens + used.completion_tokens, finish) == (256, "length"), used
