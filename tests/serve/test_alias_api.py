"""Aliases through the real API (uvicorn, the ``openai`` client, the tiny model on PyTorch):
16 clients while the split moves and the split they observe over 1,008 conversations, the gate
on promotion, the admin routes' errors, and the live stats."""

from __future__ import annotations

import functools
import json
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
from core.store.home import open_store
from core.store.tables import audit_rows
from serve.aliases import draw

MSGS = [{"role": "user", "content": "Where is my order?"}]
KEY = "k"  # the admin key, named "ops"
CHAT_KEY = "chat-key-1"


@pytest.fixture
def served(session, home):
    """(server, url): adapters a and b passed their gate, c failed it; the API's admin key is
    'k' (named ops), its chat key CHAT_KEY."""
    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.engines import Engines
    from serve.openai_api import OpenAIServer

    for name, verdict in (("a", PASSED), ("b", PASSED), ("c", FAILED)):
        set_gate(name, verdict)
    from serve.keys import KeyRing

    keys = KeyRing(chat={"web": CHAT_KEY}, admin={"ops": KEY})  # the audit names the admin key
    server = OpenAIServer(Engines(session, "pytorch"), keys, FeedbackStore())
    app = FastAPI()
    app.include_router(server.router())
    with serving(app) as url:
        yield server, url
    client.cache_clear()  # a later server may get the same port: no stale connections


@functools.lru_cache
def client(url):
    """One client per server, shared by the threads (its connection pool too)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key=CHAT_KEY, max_retries=0, timeout=120)


def admin(url, method, path, body=None, key=KEY):
    return httpx.request(
        method,
        f"{url}/v1/aliases{path}",
        content=None if body is None else json.dumps(body),  # ASCII: a lone surrogate escaped
        timeout=30,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )


def ask(url, messages, *, user=None, header=None, stream=False, max_tokens=2):
    """One answer to ``support-bot``: (version from the header, fingerprint, text)."""
    extra = {"extra_headers": {"X-TuneDesk-Conversation": header}} if header else {}
    raw = client(url).chat.completions.with_raw_response.create(
        model="support-bot",
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=stream,
        **({"user": user} if user else {}),
        **extra,
    )
    version = raw.headers["X-TuneDesk-Version"]
    if stream:
        chunks = list(raw.parse())
        return (
            version,
            chunks[0].system_fingerprint,
            "".join(c.choices[0].delta.content or "" for c in chunks),
        )
    done = raw.parse()
    return version, done.system_fingerprint, done.choices[0].message.content


CLIENTS, PER_PHASE = 16, 48  # conversation turns answered per phase, at least
SPLIT_EACH = (
    63  # fresh conversations per client in the split part: 16 x 63 = 1,008 requests at 90/10
)


class Traffic:
    """What 16 clients saw: each conversation's versions, the phase its first answer was picked
    in (None: during a change), the split part's versions, and the requests that failed."""

    def __init__(self):
        self.lock, self.stop = threading.Condition(), threading.Event()
        self.phase, self.mode, self.done, self.failed = 0, "chat", 0, []
        self.seen = defaultdict(set)  # conversation -> versions that answered it
        self.first = {}  # conversation -> (phase, version)
        self.split = Counter()  # the split part's versions
        self.gate = threading.Barrier(
            CLIENTS + 1, timeout=120
        )  # the split part starts and ends together

    def answered(self, key, phase, version, fingerprint):
        assert fingerprint == f"pytorch float32, batched; {version}"
        with self.lock:
            self.seen[key].add(version)
            self.first.setdefault(key, (phase if self.phase == phase else None, version))
            self.done += 1
            self.lock.notify_all()

    def wait(self, count):
        with self.lock:
            assert self.lock.wait_for(lambda: self.done >= count or self.failed, timeout=120), (
                self.done
            )
            return self.done


def converse(url, traffic: Traffic, i: int) -> None:
    """Client ``i``: conversations of 2-4 turns (its own ``user``, or the conversation header), and
    in the split part 63 fresh one-turn conversations; stops at its first failed request."""
    n = 0
    while not traffic.stop.is_set():
        if traffic.mode == "split":
            traffic.gate.wait()  # every client is between conversations: the draws start now
            traffic.gate.wait()
            for k in range(SPLIT_EACH):
                version, fingerprint, _ = ask(url, MSGS, user=f"s{i}-{k}", max_tokens=1)
                traffic.answered(f"s{i}-{k}", traffic.phase, version, fingerprint)
                with traffic.lock:
                    traffic.split[version] += 1
            traffic.gate.wait()
            continue
        key, n = f"t{i}-{n}", n + 1
        messages, phase = list(MSGS), traffic.phase
        for turn in range(2 + i % 3):  # conversations of 2-4 turns: the clients fall out of step
            version, fingerprint, text = ask(
                url, messages, stream=turn == 1, **({"user": key} if i % 2 else {"header": key})
            )
            traffic.answered(key, phase, version, fingerprint)
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "And now?"},
            ]


def test_sixteen_clients_lose_nothing_mix_no_conversation_and_follow_the_split(served):
    """The issue's goal: 16 clients on ``support-bot`` while the split goes 100/0 -> 90/10 -> 0/100
    -> 100/0 (through the admin route and the shelf, as the CLI writes), 1,008 fresh conversations
    at 90/10 in between; the versions read from the X-TuneDesk-Version header
    and the fingerprint."""
    server, url = served
    book = AliasBook(server.shelf())
    book.set("support-bot", {"a": 100}, by="test")
    traffic = Traffic()

    def client_loop(i):
        try:
            converse(url, traffic, i)
        except Exception as err:  # a lost request (or a broken barrier after one)
            with traffic.lock:
                traffic.failed.append(repr(err))
                traffic.lock.notify_all()
            traffic.gate.abort()

    def change(phase, split, through_api):
        with traffic.lock:
            traffic.phase = phase - 0.5  # changing: a conversation begun now is in no phase
        if through_api:
            assert admin(url, "PUT", "/support-bot", {"versions": split}).status_code == 200
        else:
            book.set("support-bot", split, by="test")
        with traffic.lock:
            traffic.phase = phase  # every conversation begun after this sees the new split

    with ThreadPoolExecutor(CLIENTS) as pool:
        clients = [pool.submit(client_loop, i) for i in range(CLIENTS)]
        try:
            traffic.wait(PER_PHASE)
            change(1, {"a": 90, "b": 10}, through_api=True)
            traffic.wait(traffic.done + PER_PHASE)
            traffic.mode = "split"
            traffic.gate.wait()
            server.aliases.rng = random.Random(
                32
            )  # no draw is running: the next 1,008 come from here
            traffic.gate.wait()
            traffic.mode = "chat"
            traffic.gate.wait()
            traffic.wait(traffic.done + PER_PHASE)
            change(2, {"a": 0, "b": 100}, through_api=False)
            traffic.wait(traffic.done + PER_PHASE)
            change(3, {"a": 100, "b": 0}, through_api=True)
            traffic.wait(traffic.done + PER_PHASE)
        finally:
            traffic.stop.set()
            traffic.gate.abort()
            for future in clients:
                future.result()
    assert traffic.failed == []
    assert all(len(v) == 1 for v in traffic.seen.values()), {
        k: v for k, v in traffic.seen.items() if len(v) > 1
    }
    began = Counter(traffic.first.values())
    assert began[(0, "b")] == 0 and began[(2, "a")] == 0 and began[(3, "b")] == 0
    assert began[(2, "b")] > 0 and began[(3, "a")] > 0, began
    total = CLIENTS * SPLIT_EACH
    assert (
        sum(traffic.split.values()) == total and abs(traffic.split["b"] / total - 0.10) <= 0.03
    ), traffic.split
    rng = random.Random(32)  # each request one draw, whichever client got which
    assert traffic.split == Counter(draw({"a": 90, "b": 10}, rng) for _ in range(total))


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
    canary = admin(url, "PUT", "/support-bot", {"versions": {"a": 90, "c": 10}})
    assert canary.status_code == 400 and canary.json()["error"]["param"] == "versions.c"
    assert admin(url, "GET", "/support-bot").json()["versions"] == {
        "a": 100
    }  # refusals change nothing
    no_reason = admin(url, "PUT", "/support-bot", {"versions": {"a": 90, "c": 10}, "force": True})
    assert no_reason.status_code == 400 and no_reason.json()["error"]["param"] == "reason"
    forced = admin(
        url,
        "PUT",
        "/support-bot",
        {"versions": {"a": 90, "c": 10}, "force": True, "reason": "canary of the refund fix"},
    )
    assert forced.status_code == 200 and forced.json()["forced"] == ["c"]
    assert "Override for c" in forced.json()["message"]
    card = admin(url, "GET", "/support-bot").json()
    assert card["versions"] == {"a": 90, "c": 10} and card["release_gates"] == {
        "a": "passed",
        "c": "failed",
    }
    assert [(r["by"], r["override"]) for r in card["history"]] == [
        ("ops", None),
        ("ops", "canary of the refund fix"),
    ]
    back = admin(url, "POST", "/support-bot/rollback")
    assert back.status_code == 200 and back.json()["to"] == {"a": 100}


def test_the_answer_check_is_set_through_the_api(served):
    _, url = served
    assert admin(url, "PUT", "/support-bot", {"versions": {"a": 100}}).json()["to"] == {"a": 100}
    assert admin(url, "GET", "/support-bot").json()["check"] == "off"
    turned = admin(url, "PUT", "/support-bot", {"check": "on"})  # alone: the split is kept
    assert turned.status_code == 200 and turned.json()["check"] == {"from": "off", "to": "on"}
    card = admin(url, "GET", "/support-bot").json()
    assert card["check"] == "on" and card["versions"] == {"a": 100}
    bad = admin(url, "PUT", "/support-bot", {"check": "sometimes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "check"


BAD_REQUESTS = [  # method, path, body, status, the field named
    ("PUT", "/support-bot", {"versions": {"a": 60, "b": 30}}, 400, "versions"),
    ("PUT", "/support-bot", {"versions": {"a": 90, "ghost": 10}}, 400, "versions.ghost"),
    ("PUT", "/support-bot", {"versions": {"a": "100"}}, 400, "versions.a"),
    ("PUT", "/support-bot", {"split": {"a": 100}}, 400, "split"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "by": "someone"}, 400, "by"),
    ("PUT", "/support-bot", {}, 400, "versions"),
    ("PUT", "/support-bot", ["a"], 400, None),
    ("PUT", "/a", {"versions": {"b": 100}}, 400, "name"),
    ("PUT", "/base", {"versions": {"b": 100}}, 400, "name"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "force": "yes"}, 400, "force"),
    (
        "PUT",
        "/support-bot",
        {"versions": {"a": 100}, "auto_rollback": {"margin": 2}},
        400,
        "auto_rollback.margin",
    ),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "auto_rollback": "on"}, 400, "auto_rollback"),
    ("PUT", "/support-bot", {"auto_rollback": {"margin": 0.1}}, 404, "versions"),
    ("GET", "/nobody", None, 404, "name"),
    ("GET", "/nobody/stats", None, 404, "name"),
    ("POST", "/nobody/promote", {"version": "a"}, 404, "name"),
    ("POST", "/nobody/rollback", {}, 404, "name"),
    ("DELETE", "/nobody", None, 404, "name"),
    # a lone surrogate anywhere in the body, named (the answer must encode, and so must the audit)
    ("PUT", "/support-bot", {"versions": {"a\ud800": 100}}, 400, "versions"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "reason": "canary \udfff"}, 400, "reason"),
    ("POST", "/support-bot/promote", {"version": "a\ud800"}, 400, "version"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "grounding": "x\ud800"}, 400, "grounding"),
    ("PUT", "/support-bot", {"versions": {"a": 100}, "x\ud800": 1}, 400, "x\ufffd"),
]


def test_bad_admin_requests_are_named_4xx_and_change_nothing(served, home):
    _, url = served
    for method, path, body, status, param in BAD_REQUESTS:
        got = admin(url, method, path, body)
        assert got.status_code == status, (path, body, got.text)
        assert (
            got.json()["error"]["param"] == param
            and got.json()["error"]["type"] == "invalid_request_error"
        )
    assert audit_rows(open_store(home)) == []


def test_the_admin_routes_need_the_key(served):
    _, url = served
    for method, path in (("GET", ""), ("PUT", "/support-bot"), ("POST", "/support-bot/rollback")):
        got = admin(url, method, path, {"versions": {"a": 100}}, key="wrong")
        assert got.status_code == 401 and got.json()["error"]["code"] == "invalid_api_key"


def test_models_list_the_alias_with_its_split_and_a_deleted_alias_is_gone(served):
    _, url = served
    admin(url, "PUT", "/support-bot", {"versions": {"a": 80, "b": 20}})
    cards = {m["id"]: m for m in client(url).models.list().model_dump()["data"]}
    assert (
        cards["support-bot"]["tunedesk_alias"] == {"versions": {"a": 80, "b": 20}} and "a" in cards
    )
    assert (
        client(url).models.retrieve("support-bot").model_dump()["tunedesk_alias"]["versions"]["b"]
        == 20
    )
    assert admin(url, "DELETE", "/support-bot").json()["to"] is None
    with pytest.raises(openai.NotFoundError):
        client(url).chat.completions.create(model="support-bot", messages=MSGS, max_tokens=1)
    assert admin(url, "GET", "").json()["data"] == []


def test_stats_count_each_versions_answers_and_its_thumbs_down(served):
    _, url = served
    admin(url, "PUT", "/support-bot", {"versions": {"a": 50, "b": 50}})
    answers = [
        client(url).chat.completions.with_raw_response.create(
            model="support-bot", messages=MSGS, max_tokens=2, user=f"c{i}"
        )
        for i in range(12)
    ]
    by_version = Counter(a.headers["X-TuneDesk-Version"] for a in answers)
    downs = [a for a in answers if a.headers["X-TuneDesk-Version"] == "a"][:2]
    for answer in downs:
        rated = httpx.post(
            f"{url}/v1/feedback",
            json={"id": answer.parse().id, "rating": "down"},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=30,
        )
        assert rated.status_code == 200
    direct = client(url).chat.completions.create(
        model="b", messages=MSGS, max_tokens=2
    )  # b asked by name
    assert (
        direct.system_fingerprint == "pytorch float32, batched"
    )  # no alias chose it: no version named
    by_version["b"] += 1  # a version's figures count every answer it gave through /v1
    with pytest.raises(openai.NotFoundError):
        client(url).chat.completions.create(model="ghost", messages=MSGS, max_tokens=1)
    stats = admin(url, "GET", "/support-bot/stats").json()["versions"]
    for version in ("a", "b"):
        assert stats[version]["requests"] == by_version[version] and stats[version]["errors"] == 0
        if by_version[version]:
            assert 0 < stats[version]["first_token_p50_s"] <= stats[version]["answer_p95_s"]
    assert stats["a"]["thumbs_down"] == len(downs) and stats["b"]["thumbs_down"] == 0


def test_a_raters_changed_vote_counts_though_another_rater_voted_after_the_first(served):
    _, url = served
    admin(url, "PUT", "/support-bot", {"versions": {"a": 100}})
    answer = client(url).chat.completions.create(model="support-bot", messages=MSGS, max_tokens=2)
    for key, rating in ((CHAT_KEY, "up"), (KEY, "up"), (CHAT_KEY, "down")):
        rated = httpx.post(
            f"{url}/v1/feedback",
            json={"id": answer.id, "rating": rating},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert rated.status_code == 200, rated.text
    stats = admin(url, "GET", "/support-bot/stats").json()["versions"]["a"]
    assert (stats["thumbs_up"], stats["thumbs_down"]) == (0, 1)  # the chat key's down, latest
