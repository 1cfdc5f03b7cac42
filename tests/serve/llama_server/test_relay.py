"""Tool-calling chats relayed to llama-server, against a stand-in upstream that can hang up: a
request whose connection was closed before any answer goes again once, and an upstream that
never answers is a 502 in OpenAI's error shape that names the cause (not a bare 500)."""

from __future__ import annotations

import json

import openai
import pytest
from serve_helpers import TRACK_ORDER_TOOLS, api_app, serving, stand_in_llama_server

from serve.engines import Engines
from serve.llama_server.engine import LlamaServerEngine
from serve.llama_server.relay import relay_tools
from serve.llama_server.upstreams import Upstreams

MSGS = [{"role": "user", "content": "Where is order 12?"}]


def test_a_hang_up_is_sent_again_once_and_a_dead_upstream_is_a_502_in_words(llama_session):
    with stand_in_llama_server() as (url, drops, seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        with serving(api_app(engines)) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=30)
            drops["left"] = 1
            reply = client.chat.completions.create(
                model="base", messages=MSGS, tools=TRACK_ORDER_TOOLS, max_tokens=8
            )
            call = reply.choices[0].message.tool_calls[0]
            assert (call.function.name, json.loads(call.function.arguments)) == (
                "track_order",
                {"order": 12},
            )
            assert len(seen) == 2 and seen[0] == seen[1] and seen[1]["tools"] == TRACK_ORDER_TOOLS

            drops["left"] = 2  # hangs up on the retry too
            with pytest.raises(openai.APIStatusError) as failed:
                client.chat.completions.create(
                    model="base", messages=MSGS, tools=TRACK_ORDER_TOOLS, max_tokens=8
                )
            assert failed.value.status_code == 502
            assert failed.value.body["type"] == "server_error"
            assert "llama-server did not answer: RemoteProtocolError" in failed.value.message
            assert len(seen) == 4
        assert engine.upstreams.all[0].inflight == 0  # every request let go of its upstream


def test_relays_from_one_event_loop_then_another_open_their_own_connections(llama):
    """An app restarted in the same process runs a new event loop: its relays never reuse the
    old loop's kept-alive connections (those fail: the loop that owned them is closed)."""
    import asyncio

    async def relayed():
        body = {"messages": MSGS, "tools": TRACK_ORDER_TOOLS, "max_tokens": 6, "temperature": 0}
        response = await relay_tools(llama, body, False, "a", "a")
        return response.status_code, json.loads(response.body)["choices"][0]["message"]

    first = asyncio.run(relayed())
    assert first[0] == 200
    assert asyncio.run(relayed()) == first


def test_a_relayed_tool_calling_answer_is_rated_by_its_id_streamed_or_not(llama_session, tmp_path):
    import httpx

    from feedback.review import review
    from feedback.store import FeedbackStore

    store = FeedbackStore(tmp_path / "home", log_conversations=True)
    with stand_in_llama_server() as (url, _drops, _seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        with serving(api_app(engines, feedback=store)) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=30)
            asked = {"model": "base", "messages": MSGS, "tools": TRACK_ORDER_TOOLS}
            whole = client.chat.completions.create(**asked, max_tokens=8)
            chunks = list(client.chat.completions.create(**asked, max_tokens=8, stream=True))
            streamed = {c.id for c in chunks}
            assert len(streamed) == 1 and whole.id not in streamed | {"chatcmpl-1"}
            votes = [
                httpx.post(
                    f"{api}/v1/feedback",
                    json={"id": answer_id, "rating": rating, **extra},
                    timeout=30,
                )
                for answer_id, rating, extra in [
                    (whole.id, "down", {"correction": "Order 12 ships Monday."}),
                    (next(iter(streamed)), "up", {}),
                ]
            ]
    assert [v.status_code for v in votes] == [200, 200], [v.text for v in votes]
    rows = store.ratings()
    assert [(r["answer_id"], r["rating"], r["engine"]) for r in rows] == [
        (whole.id, "down", engine.label),
        (next(iter(streamed)), "up", engine.label),
    ]
    called = [{"name": "track_order", "arguments": '{"order": 12}'}]
    assert [r["tool_calls"] for r in rows] == [called, called]
    assert rows[0]["messages"] == MSGS and rows[0]["answer"] == ""
    # votable, counted in the version's thumbs; training data holds no tool calls: refused
    with pytest.raises(ValueError, match="called tools .track_order."):
        review(store, rows[0]["id"], "accepted")


def test_a_vote_sent_as_soon_as_a_relayed_stream_ends_finds_its_answer(llama_session, tmp_path):
    import time

    import httpx

    from feedback.store import FeedbackStore

    class SlowToKeep(FeedbackStore):  # a busy disk, a remote PostgreSQL
        def record(self, *args, **kwargs):
            time.sleep(0.5)
            return super().record(*args, **kwargs)

    store = SlowToKeep(tmp_path / "home")
    with stand_in_llama_server() as (url, _drops, _seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        with serving(api_app(engines, feedback=store)) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=30)
            chunks = list(
                client.chat.completions.create(
                    model="base", messages=MSGS, tools=TRACK_ORDER_TOOLS, stream=True
                )
            )
            got = httpx.post(
                f"{api}/v1/feedback", json={"id": chunks[0].id, "rating": "up"}, timeout=30
            )
    assert got.status_code == 200, got.text
    assert [r["tool_calls"] for r in store.ratings()] == [[{"name": "track_order"}]]


def test_a_whole_relayed_answer_is_bounded_by_the_answer_timeout_a_504_with_nothing_kept(
    llama_session, tmp_path, monkeypatch
):
    """A non-streamed relay waited on httpx's own 600 s read timeout whatever the answer
    timeout said; now it ends with the whole-answer cap the token-id path has, as a 504 naming
    it, the upstream request closed (llama-server stops), nothing kept for /v1/feedback, and
    the version's error counted as a timed-out answer is."""
    import time

    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.openai_api import OpenAIServer
    from serve.version_stats import VersionStats

    kept = []

    class Kept(FeedbackStore):
        def record(self, *args, **kwargs):
            kept.append(args[0])
            return super().record(*args, **kwargs)

    monkeypatch.setenv("TUNEDESK_ANSWER_TIMEOUT_S", "2")
    stats = VersionStats()
    with stand_in_llama_server() as (url, drops, seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        app = FastAPI()
        app.include_router(
            OpenAIServer(engines, feedback=Kept(tmp_path / "home"), stats=stats).router()
        )
        with serving(app) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=60)
            asked = {"model": "base", "messages": MSGS, "tools": TRACK_ORDER_TOOLS}
            drops["hold_s"] = 30.0
            start = time.monotonic()
            with pytest.raises(openai.APIStatusError) as late:
                client.chat.completions.create(**asked, max_tokens=8)
            waited = time.monotonic() - start
            assert late.value.status_code == 504 and 2 <= waited < 6, waited
            assert late.value.body["code"] == "answer_timeout"
            assert late.value.body["message"] == (
                "the answer took longer than 2 s (the answer timeout, TUNEDESK_ANSWER_TIMEOUT_S); "
                "the request was cancelled"
            )
            deadline = time.monotonic() + 5
            while not drops["hung_up"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert drops["hung_up"] == 1  # the upstream request was closed, not left decoding
            assert kept == [] and engine.upstreams.all[0].inflight == 0
            assert stats.counts("base") == (1, 1)
            monkeypatch.setenv("TUNEDESK_ANSWER_IDLE_S", "1")  # a stream: its first chunk
            with pytest.raises(openai.APIStatusError) as late:
                list(client.chat.completions.create(**asked, max_tokens=8, stream=True))
            assert late.value.status_code == 504
            assert "no progress on this answer for 1 s" in late.value.body["message"]
            deadline = time.monotonic() + 5
            while drops["hung_up"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert drops["hung_up"] == 2 and kept == [] and stats.counts("base") == (2, 2)
            drops["hold_s"] = 0.5  # within the bound: answered, kept, counted
            reply = client.chat.completions.create(**asked, max_tokens=8)
            assert reply.choices[0].message.tool_calls[0].function.name == "track_order"
            assert kept == [reply.id] and stats.counts("base") == (3, 2)


def test_a_relayed_answer_the_store_cannot_keep_is_still_answered(llama_session, caplog):
    from feedback.store import FeedbackStore

    class Broken(FeedbackStore):
        def record(self, *args, **kwargs):
            raise OSError("disk full")

    with stand_in_llama_server() as (url, _drops, _seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        with serving(api_app(engines, feedback=Broken())) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=30)
            asked = {"model": "base", "messages": MSGS, "tools": TRACK_ORDER_TOOLS}
            reply = client.chat.completions.create(**asked, max_tokens=8)
            assert reply.choices[0].message.tool_calls[0].function.name == "track_order"
            assert list(client.chat.completions.create(**asked, max_tokens=8, stream=True))
    assert caplog.text.count("could not be kept for /v1/feedback") == 2


def test_relayed_answers_count_in_their_versions_live_figures(llama_session):
    """Every /v1 answer counts (docs/serving.md); a relayed one was left out, so a version's
    tool-calling traffic showed only its failures."""
    from fastapi import FastAPI

    from serve.openai_api import OpenAIServer
    from serve.version_stats import VersionStats

    stats = VersionStats()
    with stand_in_llama_server() as (url, drops, _seen):
        engine = LlamaServerEngine(
            llama_session, Upstreams(None, [url]), lora_file=lambda name: None, ctx_per_slot=512
        )
        engines = Engines(
            llama_session, "llama.cpp", llama_factory=lambda session, max_queue: engine
        )
        engines.prepare()
        app = FastAPI()
        app.include_router(OpenAIServer(engines, stats=stats).router())
        with serving(app) as api:
            client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=30)
            asked = {"model": "base", "messages": MSGS, "tools": TRACK_ORDER_TOOLS}
            client.chat.completions.create(**asked, max_tokens=8)
            assert list(client.chat.completions.create(**asked, max_tokens=8, stream=True))
            got = stats.summary("base")
            assert (got["requests"], got["errors"]) == (2, 0)
            # each timed to its end; the first token only where it streamed
            assert 0 < got["first_token_p50_s"] <= got["answer_p95_s"]
            drops["left"] = 2  # the upstream never answers: a 502, one error
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(**asked, max_tokens=8)
    got = stats.summary("base")
    assert (got["requests"], got["errors"]) == (3, 1)


def test_a_prompt_too_long_is_a_400_naming_messages_relayed_or_not_and_counts_nowhere(
    llama_session, llama
):
    """The token-id path refuses it itself, at llama-server's slot context (this tiny model's
    512 positions, not ctx_per_slot's 2048: past them llama-server refused it in the stream);
    a tools chat is refused by llama-server (its ``exceed_context_size_error``). Both say it in
    one sentence naming messages, and neither counts in the version's figures, which an
    alias's automatic rollback reads: a client's huge prompts are its own."""
    import re

    import httpx
    from fastapi import FastAPI

    from serve.openai_api import OpenAIServer
    from serve.version_stats import VersionStats

    upstream = llama.upstreams.all[0]
    props = httpx.get(f"{upstream.url}/props", headers=upstream.headers, timeout=10).json()
    slot = props["default_generation_settings"]["n_ctx"]  # this tiny model's 512 positions
    stats = VersionStats()
    engines = Engines(llama_session, "llama.cpp", llama_factory=lambda session, max_queue: llama)
    engines.prepare()
    app = FastAPI()
    app.include_router(OpenAIServer(engines, stats=stats).router())
    words = "where is my order "
    assert llama.slot_tokens() == slot  # the token-id path refuses what llama-server would
    cases = [  # (prompt, tools, the longest conversation the sentence names)
        (words * 600, openai.NOT_GIVEN, slot - 2),  # one answer token left at least
        (words * (slot // 4 + 2), openai.NOT_GIVEN, slot - 2),  # just past it
        (words * 600, TRACK_ORDER_TOOLS, slot - 1),  # llama-server's own refusal
    ]
    with serving(app) as api:
        client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=120)
        for content, tools, limit in cases:
            for stream in (False, True):
                with pytest.raises(openai.BadRequestError) as refused:
                    asked = [{"role": "user", "content": content}]
                    list(
                        client.chat.completions.create(
                            model="a", messages=asked, tools=tools, max_tokens=4, stream=stream
                        )
                        or []
                    )
                error = refused.value.body
                assert (error["param"], error["code"]) == ("messages", "context_length_exceeded")
                assert re.fullmatch(
                    rf"the conversation is \d+ tokens; this server reads at most {limit}: "
                    "shorten the message or clear the chat",
                    error["message"],
                ), (tools, stream, error)
        assert stats.counts("a") == (0, 0)
        client.chat.completions.create(
            model="a", messages=MSGS, tools=TRACK_ORDER_TOOLS, max_tokens=4
        )
        assert stats.counts("a") == (1, 0)
    assert all(upstream.inflight == 0 for upstream in llama.upstreams.all)


def test_a_tools_chat_llama_server_refuses_is_a_400_in_openai_shape_naming_the_field(
    llama_session, llama
):
    """llama-server's own 400 was relayed as it came (``code`` 400, no ``param``); it is
    said as the token-id path says it, naming response_format, and counts against no version."""
    from fastapi import FastAPI

    from serve.openai_api import OpenAIServer
    from serve.version_stats import VersionStats

    stats = VersionStats()
    engines = Engines(llama_session, "llama.cpp", llama_factory=lambda session, max_queue: llama)
    engines.prepare()
    app = FastAPI()
    app.include_router(OpenAIServer(engines, stats=stats).router())
    bogus = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}}
    with serving(app) as api:
        client = openai.OpenAI(base_url=f"{api}/v1", api_key="k", max_retries=0, timeout=120)
        # the token-id path's, not streamed (streamed, it comes after the headers, in the stream)
        for tools, stream in [
            (TRACK_ORDER_TOOLS, False),
            (TRACK_ORDER_TOOLS, True),
            (openai.NOT_GIVEN, False),
        ]:
            with pytest.raises(openai.BadRequestError) as refused:
                list(
                    client.chat.completions.create(
                        model="a",
                        messages=MSGS,
                        tools=tools,
                        response_format=bogus,
                        max_tokens=4,
                        stream=stream,
                    )
                    or []
                )
            error = refused.value.body
            assert (error["param"], error["code"], error["type"]) == (
                "response_format",
                None,
                "invalid_request_error",
            ), (tools, stream, error)
            assert error["message"].startswith("llama-server refused the request: "), error
    assert stats.counts("a") == (0, 0)
