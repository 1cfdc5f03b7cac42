"""Aliases through the real API (uvicorn, the ``openai`` client, the tiny model on PyTorch):
16 clients while the split moves, the observed split, the gate on promotion, the admin
routes' errors, and the live stats."""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from alias_helpers import FAILED, PASSED, set_gate
from serve_helpers import serving

from adapters.shelf.aliases import AliasBook
from serve.aliases import draw

MSGS = [{"role": "user", "content": "Where is my order?"}]
KEY = "k"


@pytest.fixture
def served(session, home):
    """(server, url): adapters a and b passed their gate, c failed it; the API needs key 'k'."""
    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.engines import Engines
    from serve.openai_api import OpenAIServer

    for name, verdict in (("a", PASSED), ("b", PASSED), ("c", FAILED)):
        set_gate(name, verdict)
    server = OpenAIServer(Engines(session, "pytorch"), KEY, FeedbackStore())
    app = FastAPI()
    app.include_router(server.router())
    with serving(app) as url:
        yield server, url
    client.cache_clear()  # a later server may get the same port: no stale connections


@functools.lru_cache
def client(url):
    """One client per server, shared by the threads (its connection pool too)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120)


def admin(url, method, path, body=None, key=KEY):
    return httpx.request(method, f"{url}/v1/aliases{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {key}"})


def ask(url, messages, *, user=None, header=None, stream=False):
    """One answer to ``support-bot``: (version from the header, fingerprint, text)."""
    extra = {"extra_headers": {"X-TuneDesk-Conversation": header}} if header else {}
    raw = client(url).chat.completions.with_raw_response.create(
        model="support-bot", messages=messages, max_tokens=2, temperature=0, stream=stream,
        **({"user": user} if user else {}), **extra)
    version = raw.headers["X-TuneDesk-Version"]
    if stream:
        chunks = list(raw.parse())
        return version, chunks[0].system_fingerprint, "".join(c.choices[0].delta.content or "" for c in chunks)
    done = raw.parse()
    return version, done.system_fingerprint, done.choices[0].message.content


def test_sixteen_clients_lose_nothing_and_no_conversation_changes_version_while_the_split_moves(served):
    server, url = served
    book = AliasBook(server.shelf())
    book.set("support-bot", {"a": 100}, by="test")
    phases = [{"a": 90, "b": 10}, {"a": 0, "b": 100}, {"a": 100, "b": 0}]
    state = {"phase": 0, "done": 0, "failed": []}
    lock, stop = threading.Condition(), threading.Event()
    seen = defaultdict(set)  # conversation -> versions that answered it
    first = {}  # conversation -> (the phase its first answer was picked in, or None: during a change; version)

    def client_loop(i):
        n = 0
        while not stop.is_set():
            key, n = f"t{i}-{n}", n + 1
            messages = list(MSGS)
            with lock:
                phase = state["phase"]
            for turn in range(2 + i % 3):  # conversations of 2-4 turns: the clients fall out of step
                try:
                    version, fingerprint, text = ask(url, messages, stream=turn == 1,
                                                     **({"user": key} if i % 2 else {"header": key}))
                except Exception as err:  # a lost request
                    with lock:
                        state["failed"].append(repr(err))
                    return
                with lock:
                    phase = phase if state["phase"] == phase else None
                assert fingerprint == f"pytorch float32, batched; {version}"
                seen[key].add(version)
                first.setdefault(key, (phase, version))
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And now?"}]
                with lock:
                    state["done"] += 1
                    lock.notify_all()

    with ThreadPoolExecutor(16) as pool:
        clients = [pool.submit(client_loop, i) for i in range(16)]
        for number, split in enumerate(phases, start=1):
            with lock:
                lock.wait_for(lambda at=64 * number: state["done"] >= at or state["failed"], timeout=120)
            with lock:
                state["phase"] = number - 0.5  # changing: a conversation begun now is in no phase
            if number == 2:  # through the admin route, the others as the CLI writes
                assert admin(url, "PUT", "/support-bot", {"versions": split}).status_code == 200
            else:
                book.set("support-bot", split, by="test")
            with lock:
                state["phase"] = number  # every conversation begun after this sees the new split
        with lock:
            lock.wait_for(lambda: state["done"] >= 64 * (len(phases) + 1) or state["failed"], timeout=120)
        stop.set()
        for future in clients:
            future.result()
    assert state["failed"] == []
    assert all(len(versions) == 1 for versions in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    began = Counter((phase, version) for phase, version in first.values())
    assert began[(0, "b")] == 0 and began[(2, "a")] == 0 and began[(3, "b")] == 0
    assert began[(2, "b")] > 0 and began[(3, "a")] > 0, (began, state)


def test_the_observed_split_of_keyless_requests_follows_the_weights(served):
    server, url = served
    AliasBook(server.shelf()).set("support-bot", {"a": 90, "b": 10}, by="test")
    server.aliases.rng = random.Random(7)
    with ThreadPoolExecutor(16) as pool:
        versions = Counter(pool.map(lambda _: ask(url, MSGS)[0], range(100)))
    rng = random.Random(7)  # the same draws, whichever request got which
    assert versions == Counter(draw({"a": 90, "b": 10}, rng) for _ in range(100))
    assert abs(versions["b"] / 100 - 0.10) <= 0.05


def test_a_failed_gate_blocks_promotion_through_the_api_unless_overridden(served, home):
    _, url = served
    assert admin(url, "PUT", "/support-bot", {"versions": {"a": 100}}).status_code == 200
    refused = admin(url, "POST", "/support-bot/promote", {"version": "c"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "versions.c"
    assert "release gate of c: failed" in refused.json()["error"]["message"]
    no_reason = admin(url, "PUT", "/support-bot", {"versions": {"a": 90, "c": 10}, "force": True})
    assert no_reason.status_code == 400 and no_reason.json()["error"]["param"] == "reason"
    forced = admin(url, "PUT", "/support-bot", {"versions": {"a": 90, "c": 10}, "force": True,
                                                "reason": "canary of the refund fix", "by": "ops"})
    assert forced.status_code == 200 and forced.json()["forced"] == ["c"]
    assert "Override for c" in forced.json()["message"]
    card = admin(url, "GET", "/support-bot").json()
    assert card["versions"] == {"a": 90, "c": 10} and card["release_gates"] == {"a": "passed", "c": "failed"}
    assert [(r["by"], r["override"]) for r in card["history"]] == [
        ("api (127.0.0.1)", None), ("ops", "canary of the refund fix")]
    back = admin(url, "POST", "/support-bot/rollback")
    assert back.status_code == 200 and back.json()["to"] == {"a": 100}


BAD_REQUESTS = [  # method, path, body, status, the field named
    ("PUT", "/support-bot", {"versions": {"a": 60, "b": 30}}, 400, "versions"),
    ("PUT", "/support-bot", {"versions": {"a": 90, "ghost": 10}}, 400, "versions.ghost"),
    ("PUT", "/support-bot", {"versions": {"a": "100"}}, 400, "versions.a"),
    ("PUT", "/support-bot", {"split": {"a": 100}}, 400, "split"),
    ("PUT", "/support-bot", {}, 400, "versions"),
    ("PUT", "/support-bot", ["a"], 400, None),
    ("PUT", "/a", {"versions": {"b": 100}}, 400, "name"),
    ("PUT", "/base", {"versions": {"b": 100}}, 400, "name"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "force": "yes"}, 400, "force"),
    ("GET", "/nobody", None, 404, "name"),
    ("GET", "/nobody/stats", None, 404, "name"),
    ("POST", "/nobody/promote", {"version": "a"}, 404, "name"),
    ("DELETE", "/nobody", None, 404, "name"),
]


def test_bad_admin_requests_are_named_4xx_and_change_nothing(served, home):
    _, url = served
    for method, path, body, status, param in BAD_REQUESTS:
        got = admin(url, method, path, body)
        assert got.status_code == status, (path, body, got.text)
        assert got.json()["error"]["param"] == param and got.json()["error"]["type"] == "invalid_request_error"
    assert not (home / "releases" / "audit.jsonl").exists()


def test_the_admin_routes_need_the_key(served):
    _, url = served
    for method, path in (("GET", ""), ("PUT", "/support-bot"), ("POST", "/support-bot/rollback")):
        got = admin(url, method, path, {"versions": {"a": 100}}, key="wrong")
        assert got.status_code == 401 and got.json()["error"]["code"] == "invalid_api_key"


def test_models_list_the_alias_with_its_split_and_a_deleted_alias_is_gone(served):
    _, url = served
    admin(url, "PUT", "/support-bot", {"versions": {"a": 80, "b": 20}})
    cards = {m["id"]: m for m in client(url).models.list().model_dump()["data"]}
    assert cards["support-bot"]["tunedesk_alias"] == {"versions": {"a": 80, "b": 20}} and "a" in cards
    assert client(url).models.retrieve("support-bot").model_dump()["tunedesk_alias"]["versions"]["b"] == 20
    assert admin(url, "DELETE", "/support-bot").json()["to"] is None
    with pytest.raises(openai.NotFoundError):
        client(url).chat.completions.create(model="support-bot", messages=MSGS, max_tokens=1)
    assert admin(url, "GET", "").json()["data"] == []


def test_stats_count_each_versions_answers_and_its_thumbs_down(served):
    _, url = served
    admin(url, "PUT", "/support-bot", {"versions": {"a": 50, "b": 50}})
    answers = [client(url).chat.completions.with_raw_response.create(
        model="support-bot", messages=MSGS, max_tokens=2, user=f"c{i}") for i in range(12)]
    by_version = Counter(a.headers["X-TuneDesk-Version"] for a in answers)
    downs = [a for a in answers if a.headers["X-TuneDesk-Version"] == "a"][:2]
    for answer in downs:
        rated = httpx.post(f"{url}/v1/feedback", json={"id": answer.parse().id, "rating": "down"},
                           headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert rated.status_code == 200
    stats = admin(url, "GET", "/support-bot/stats").json()["versions"]
    for version in ("a", "b"):
        assert stats[version]["requests"] == by_version[version] and stats[version]["errors"] == 0
        if by_version[version]:
            assert 0 < stats[version]["first_token_p50_s"] <= stats[version]["answer_p95_s"]
    assert stats["a"]["thumbs_down"] == len(downs) and stats["b"]["thumbs_down"] == 0
