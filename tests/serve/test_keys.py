"""Named keys with roles: a chat key answers, feedback and models, and gets 403 with a sentence
on every admin route; an admin key changes aliases and the audit names it; the keys' variables
are checked in sentences that never show a key."""

from __future__ import annotations

import httpx
import pytest
from alias_helpers import PASSED, set_gate
from serve_helpers import serving

from serve.keys import KeyRing, key_ring, parse_keys

CHAT, ADMIN = "chat-key-web-1", "admin-key-ana-1"
MOBILE = "chat-key-mobile-1"  # another client's chat key
MSGS = [{"role": "user", "content": "Where is my order?"}]
ADMIN_ROUTES = [  # every route that shows or changes what is served
    ("GET", "/v1/aliases", None),
    ("GET", "/v1/aliases/support-bot", None),
    ("PUT", "/v1/aliases/support-bot", {"versions": {"b": 100}}),
    ("PUT", "/v1/aliases/support-bot", {"auto_rollback": {"margin": 0.1}}),
    ("PUT", "/v1/aliases/support-bot", {"versions": {"b": 100}, "force": True, "reason": "x"}),
    ("POST", "/v1/aliases/support-bot/promote", {"version": "b"}),
    ("POST", "/v1/aliases/support-bot/rollback", {}),
    ("GET", "/v1/aliases/support-bot/stats", None),
    ("DELETE", "/v1/aliases/support-bot", None),
    ("GET", "/metrics", None),
]


@pytest.fixture
def url(session, home):
    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.engines import Engines
    from serve.openai_api import OpenAIServer

    for name in ("a", "b"):
        set_gate(name, PASSED)
    keys = KeyRing(chat={"web": CHAT, "mobile": MOBILE}, admin={"ana": ADMIN})
    app = FastAPI()
    app.include_router(OpenAIServer(Engines(session, "pytorch"), keys, FeedbackStore()).router())
    with serving(app) as base:
        yield base


def audit_rows(home):
    """The alias audit of ``home`` (the test's TuneDesk home) as the store keeps it."""
    from adapters.shelf.aliases import AliasBook

    assert str(home) == str(AliasBook().shelf.home)
    return AliasBook().history()


def call(url, method, path, body=None, key=CHAT):
    return httpx.request(
        method, f"{url}{path}", json=body, timeout=60, headers={"Authorization": f"Bearer {key}"}
    )


def test_a_chat_key_gets_403_on_every_admin_route_and_changes_nothing(url, home):
    assert (
        call(url, "PUT", "/v1/aliases/support-bot", {"versions": {"a": 100}}, ADMIN).status_code
        == 200
    )
    audit = audit_rows(home)
    for method, path, body in ADMIN_ROUTES:
        got = call(url, method, path, body)
        assert got.status_code == 403, (method, path, got.text)
        error = got.json()["error"]
        assert error["code"] == "admin_key_required" and error["type"] == "permission_error"
        assert error["message"] == (
            f"the key 'web' is a chat key: {path} changes or shows what is served "
            "and needs an admin key (TUNEDESK_ADMIN_KEYS)"
        )
    assert audit_rows(home) == audit
    assert call(url, "GET", "/v1/aliases/support-bot", key=ADMIN).json()["versions"] == {"a": 100}


def test_a_chat_key_answers_rates_and_lists_and_a_wrong_key_is_401(url):
    assert call(url, "GET", "/v1/models").status_code == 200
    answer = call(
        url, "POST", "/v1/chat/completions", {"model": "a", "messages": MSGS, "max_tokens": 2}
    )
    assert answer.status_code == 200
    rated = call(url, "POST", "/v1/feedback", {"id": answer.json()["id"], "rating": "up"})
    assert rated.status_code == 200
    for key in ("wrong", "-", CHAT + "x", CHAT[:-1]):
        got = call(url, "GET", "/v1/models", key=key)
        assert got.status_code == 401 and got.json()["error"]["code"] == "invalid_api_key"
    assert call(url, "GET", "/v1/aliases", key="wrong").status_code == 401  # unknown before role
    assert call(url, "GET", "/v1/models", key=ADMIN).status_code == 200  # an admin key answers too


def test_an_answer_is_rated_by_the_chat_key_it_was_served_to_and_no_other(url):
    """A support widget rates with the key it asked with: another client's chat key cannot rate
    (nor flood down) answers it never saw, even knowing their ids: the same 404 as an id never
    served, nothing stored. An admin key (a support lead's console) may rate any. No key
    accepts a correction through /v1 (the review is the Review tab's and the CLI's)."""
    import openai

    from feedback.store import FeedbackStore

    web = openai.OpenAI(base_url=f"{url}/v1", api_key=CHAT, max_retries=0, timeout=60)
    whole = web.chat.completions.create(model="a", messages=MSGS, max_tokens=2).id
    streamed = {
        c.id
        for c in web.chat.completions.create(model="a", messages=MSGS, max_tokens=2, stream=True)
    }.pop()
    for answer_id in (whole, streamed):
        stolen = call(url, "POST", "/v1/feedback", {"id": answer_id, "rating": "down"}, MOBILE)
        unknown = call(url, "POST", "/v1/feedback", {"id": "chatcmpl-x", "rating": "down"}, MOBILE)
        assert stolen.status_code == unknown.status_code == 404, stolen.text
        assert stolen.json()["error"]["param"] == "id" and "to this key" in stolen.text
        assert stolen.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "'chatcmpl-x'", repr(answer_id)
        )
    # the pages' Chat tab keeps its answers by an id made of the conversation: not /v1's to rate
    FeedbackStore().record("chat-0123", "a", "v1", "pytorch", MSGS, "Soon.", source="chat")
    chat_tab = call(url, "POST", "/v1/feedback", {"id": "chat-0123", "rating": "down"})
    assert chat_tab.status_code == 404, chat_tab.text
    assert FeedbackStore().ratings() == []
    for answer_id in (whole, streamed):
        for key in (CHAT, ADMIN):
            got = call(url, "POST", "/v1/feedback", {"id": answer_id, "rating": "up"}, key)
            assert got.status_code == 200, got.text
    accept = {"id": whole, "rating": "down", "correction": "Mine.", "status": "accepted"}
    refused = call(url, "POST", "/v1/feedback", accept)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "status"
    rows = FeedbackStore().ratings()
    assert sorted((r["answer_id"] == whole, r["rater"], r["status"]) for r in rows) == [
        (False, "ana", "new"),
        (False, "web", "new"),
        (True, "ana", "new"),
        (True, "web", "new"),
    ]
    assert {r["rating"] for r in rows} == {"up"}


def test_the_audit_names_the_admin_key_never_what_the_client_writes(url, home):
    steps = [
        ("PUT", "/v1/aliases/support-bot", {"versions": {"a": 100}}),
        ("PUT", "/v1/aliases/support-bot", {"versions": {"a": 90, "b": 10}}),
        ("POST", "/v1/aliases/support-bot/promote", {"version": "b"}),
        ("POST", "/v1/aliases/support-bot/rollback", {}),
        ("DELETE", "/v1/aliases/support-bot", None),
    ]
    for method, path, body in steps:
        assert call(url, method, path, body, ADMIN).status_code == 200, path
    rows = audit_rows(home)
    assert [r["by"] for r in rows] == ["ana"] * 5
    forged = call(
        url, "PUT", "/v1/aliases/support-bot", {"versions": {"a": 100}, "by": "ceo"}, ADMIN
    )
    assert forged.status_code == 400 and forged.json()["error"]["param"] == "by"
    assert len(audit_rows(home)) == 5


def test_a_closed_server_without_keys_refuses_in_a_sentence(session):
    from fastapi import FastAPI

    from serve.engines import Engines
    from serve.openai_api import OpenAIServer

    app = FastAPI()
    app.include_router(OpenAIServer(Engines(session, "pytorch"), KeyRing(closed=True)).router())
    with serving(app) as base:
        got = httpx.get(
            f"{base}/v1/models", timeout=30, headers={"Authorization": "Bearer anything"}
        )
    assert got.status_code == 401 and "set TUNEDESK_CHAT_KEYS" in got.json()["error"]["message"]


def test_key_variables_are_checked_in_sentences_that_never_show_a_key():
    env = {
        "TUNEDESK_CHAT_KEYS": "web:chat-key-1,app:chat-key-2",
        "TUNEDESK_ADMIN_KEYS": "ana:admin-key-1",
    }
    ring = key_ring("old-single", environ=env)
    assert ring.chat == {"web": "chat-key-1", "app": "chat-key-2", "api-key": "old-single"}
    assert ring.admin == {"ana": "admin-key-1"}
    for text, wanted in [
        ("web", "entry 1 must look like name:key"),
        ("a:12345678,a:87654321", "given twice"),
        (":12345678", "entry 1"),
        ("web:short", "shorter than 8"),
        # a key no HTTP client sends as written: the openai client refuses it, curl's UTF-8 is 401
        ("web:clé-secrète-1", "printable ASCII"),
        ("web:key-\x01-with-control", "printable ASCII"),
    ]:
        with pytest.raises(ValueError, match=wanted) as refused:
            parse_keys(text, "TUNEDESK_CHAT_KEYS")
        assert "short" not in str(refused.value).replace("shorter", "") and "12345678" not in str(
            refused.value
        )
        assert "secrète" not in str(refused.value) and "control" not in str(refused.value)
    with pytest.raises(ValueError, match="TUNEDESK_API_KEY: .*printable ASCII"):
        key_ring("clé-secrète-1", environ={})
    # the single key is held to the named keys' minimum (it was taken at any length)
    with pytest.raises(
        ValueError, match=r"TUNEDESK_API_KEY: the key \(--api-key\) is shorter than 8"
    ) as short:
        key_ring("k-123", environ={})
    assert "k-123" not in str(short.value)
    with pytest.raises(ValueError, match="two names"):
        key_ring(
            None,
            environ={"TUNEDESK_CHAT_KEYS": "a:same-key-1", "TUNEDESK_ADMIN_KEYS": "b:same-key-1"},
        )
