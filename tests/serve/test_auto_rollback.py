"""The automatic rollback: judged on figures alone, then through the real API (uvicorn, the
``openai`` client, the tiny model on PyTorch) with errors provoked by damaging the canary's
weights and thumbs-down given through ``POST /v1/feedback``."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from alias_helpers import PASSED, set_gate
from serve_helpers import serving

from adapters.shelf.aliases import AliasBook
from core.hashing import file_hash
from serve.auto_rollback import judge, stable_version

KEY = "k"
MSGS = [{"role": "user", "content": "Where is my order?"}]
POLICY = {"margin": 0.2, "min_requests": 10, "min_ratings": 3}


def figures(requests=0, errors=0, up=0, down=0) -> dict:
    return {"requests": requests, "errors": errors, "thumbs_up": up, "thumbs_down": down}


def test_the_stable_version_is_the_heaviest_and_canaries_fail_only_past_margin_and_minimums():
    assert stable_version({"v3": 90, "v4": 10}) == "v3" == stable_version({"v3": 50, "v4": 50})
    assert stable_version({"v3": 0, "v4": 100}) == "v4"
    split = {"v3": 80, "v4": 10, "v5": 10}
    failing = judge(
        split, {"v3": figures(200, 2), "v4": figures(20, 5), "v5": figures(20, 4)}, POLICY
    )
    assert list(failing) == ["v4"]  # v5: 0.20 - 0.01 is within the margin; v4: 0.25 - 0.01 is not
    assert failing["v4"] == (
        "v4: error rate 0.25 (5 of 20 requests) against v3's 0.01 (2 of 200), "
        "more than the margin 0.2"
    )
    assert (
        judge(split, {"v3": figures(200), "v4": figures(9, 9), "v5": figures()}, POLICY) == {}
    )  # 9 < 10
    assert judge(split, {"v3": figures(9), "v4": figures(50, 50), "v5": figures()}, POLICY) == {}
    rated = {"v3": figures(5, up=3), "v4": figures(5, down=3), "v5": figures(5, up=1, down=1)}
    failing = judge(split, rated, POLICY)
    assert (
        list(failing) == ["v4"]
        and "thumbs-down rate 1.00 (3 of 3 ratings) against v3's 0.00 (0 of 3)" in (failing["v4"])
    )
    draining = {
        "v3": 0,
        "v4": 100,
    }  # after a promotion the old version drains: it is the canary now
    assert list(judge(draining, {"v3": figures(10, 10), "v4": figures(10)}, POLICY)) == ["v3"]


@pytest.fixture
def served(session, home):
    """(server, url): a and b passed their gate, b's manifest records its weights (so a damaged
    file is refused); the automatic rollback checks at every request."""
    from fastapi import FastAPI

    from feedback.store import FeedbackStore
    from serve.engines import Engines
    from serve.keys import KeyRing
    from serve.openai_api import OpenAIServer

    folder = home / "adapters" / "b"
    manifest = json.loads((folder / "manifest.json").read_text())
    weights = folder / "adapter_model.safetensors"
    manifest.update(adapter_hash=file_hash(weights), adapter_bytes=weights.stat().st_size)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for name in ("a", "b"):
        set_gate(name, PASSED)
    keys = KeyRing(admin={"ana": KEY})  # the audit's "by" is the key's name
    server = OpenAIServer(
        Engines(session, "pytorch"), keys, FeedbackStore(), auto_rollback_every_s=0
    )
    app = FastAPI()
    app.include_router(server.router())
    with serving(app) as url:
        yield server, url


def ask(url, user: str):
    """(status, version, completion id or None) of one answer to ``support-bot`` for ``user``."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="support-bot", messages=MSGS, max_tokens=1, user=user
        )
    except openai.APIStatusError as err:
        return err.status_code, None, str(err)
    return 200, raw.headers["X-TuneDesk-Version"], raw.parse().id


def admin(url, method, path, body=None):
    return httpx.request(
        method,
        f"{url}/v1/aliases{path}",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {KEY}"},
    )


def test_a_canary_that_errors_is_rolled_back_once_its_alias_asks_for_it(served, home):
    server, url = served
    book = AliasBook(server.shelf())
    book.set("support-bot", {"a": 70, "b": 30}, by="ana")
    answered = []
    while len(answered) < 100 and not any(version == "b" for _, version, _ in answered):
        answered.append(
            ask(url, f"u{len(answered)}")
        )  # the split draws at random: ask until b answers
    on_b = next(f"u{i}" for i, (_, version, _) in enumerate(answered) if version == "b")
    weights = home / "adapters" / "b" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0")  # a bad copy: b is broken from now on
    failed, b_answered = [], sum(1 for _, version, _ in answered if version == "b")
    a_answered = len(answered) - b_answered
    for i in range(400):  # the split draws at random: ask until b has failed more than it answered,
        got = ask(
            url, f"v{i}"
        )  # and both a and b were asked 10 times at least (min_requests below)
        failed += [got] if got[0] != 200 else []
        a_answered += got[1] == "a"
        if b_answered + len(failed) >= 10 and len(failed) > b_answered and a_answered >= 10:
            break
    assert failed and all(
        status == 400 and "adapter 'b'" in said and "safetensors" in said
        for status, _, said in failed
    )
    assert book.get("support-bot") == {"a": 70, "b": 30}  # off unless the alias asks for it

    put = admin(url, "PUT", "/support-bot", {"auto_rollback": {"margin": 0.2, "min_requests": 10}})
    assert put.status_code == 200 and put.json()["to"] == {"a": 70, "b": 30}
    after = [
        ask(url, f"w{i}") for i in range(20)
    ]  # the first request finds b failing: nothing fails now
    assert {status for status, _, _ in after} == {200} and {version for _, version, _ in after} == {
        "a"
    }
    assert ask(url, on_b)[:2] == (200, "a")  # b's conversations moved
    row = book.history("support-bot")[-1]
    assert (row["by"], row["action"], row["from"], row["to"]) == (
        "auto-rollback",
        "auto-rollback",
        {"a": 70, "b": 30},
        {"a": 100},
    )
    b_requests = b_answered + len(failed)
    assert row["reason"].startswith(
        f"b: error rate {len(failed) / b_requests:.2f} ({len(failed)} of {b_requests} "
        "requests) against a's 0.00 (0 of "
    )
    card = admin(url, "GET", "/support-bot").json()
    assert card["auto_rollback"] == {"margin": 0.2, "min_requests": 10, "min_ratings": 10}
    assert card["history"][-1]["reason"] == row["reason"]


def test_a_canary_rated_down_is_rolled_back_at_the_rating_that_tips_it(served):
    server, url = served
    book = AliasBook(server.shelf())
    book.set(
        "support-bot", {"a": 60, "b": 40}, by="ana", auto_rollback={**POLICY, "min_requests": 1000}
    )
    ids = {"a": [], "b": []}
    for i in range(60):
        _, version, answer_id = ask(url, f"u{i}")
        ids[version].append(answer_id)
        if min(map(len, ids.values())) >= 3:
            break

    def rate(answer_id, rating):
        got = httpx.post(
            f"{url}/v1/feedback",
            json={"id": answer_id, "rating": rating},
            timeout=30,
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert got.status_code == 200

    for answer_id in ids["a"][:3]:
        rate(answer_id, "up")
    for answer_id in ids["b"][:2]:
        rate(answer_id, "down")
    assert book.get("support-bot") == {"a": 60, "b": 40}  # 2 ratings of b: fewer than 3
    rate(ids["b"][2], "down")
    assert book.get("support-bot") == {"a": 100}
    row = book.history("support-bot")[-1]
    assert row["by"] == "auto-rollback" and row["reason"] == (
        "b: thumbs-down rate 1.00 (3 of 3 ratings) against a's 0.00 (0 of 3), more than the "
        "margin 0.2"
    )


def _rate(url, answer_id, rating, key=KEY):
    return httpx.post(
        f"{url}/v1/feedback",
        json={"id": answer_id, "rating": rating},
        timeout=30,
        headers={"Authorization": f"Bearer {key}"},
    )


def test_a_flood_of_ratings_from_one_key_counts_once_and_rolls_nothing_back(served):
    server, url = served
    book = AliasBook(server.shelf())
    book.set(
        "support-bot", {"a": 60, "b": 40}, by="ana", auto_rollback={**POLICY, "min_requests": 1000}
    )
    ids = {"a": [], "b": []}
    for i in range(60):
        _, version, answer_id = ask(url, f"u{i}")
        ids[version].append(answer_id)
        if len(ids["a"]) >= 3 and ids["b"]:
            break
    for answer_id in ids["a"][:3]:
        assert _rate(url, answer_id, "up").status_code == 200
    stored = {_rate(url, ids["b"][0], "down").json()["id"] for _ in range(25)}
    assert len(stored) == 1  # one key, one answer: one vote, replaced 24 times
    assert book.get("support-bot") == {"a": 60, "b": 40}  # 1 answer rated: fewer than min_ratings 3
    stats = admin(url, "GET", "/support-bot/stats").json()["versions"]
    assert (stats["b"]["thumbs_down"], stats["b"]["thumbs_up"]) == (1, 0)
    assert stats["a"]["thumbs_up"] == 3
    assert server.auto_rollback.figures({"a": 60, "b": 40}, 0.0)["b"]["thumbs_down"] == 1
    rows = server.feedback.ratings()
    assert [r["rating"] for r in rows if r["answer_id"] == ids["b"][0]] == ["down"]


def test_feedback_past_the_keys_limit_is_429_with_retry_after(served, monkeypatch):
    from serve.rate_limit import RateLimiter, feedback_per_minute

    server, url = served
    monkeypatch.setenv("TUNEDESK_FEEDBACK_PER_MINUTE", "3")
    server.feedback_limit = RateLimiter(feedback_per_minute())
    AliasBook(server.shelf()).set("support-bot", {"a": 100}, by="ana")
    _, _, answer_id = ask(url, "u1")
    assert [_rate(url, answer_id, "down").status_code for _ in range(3)] == [200, 200, 200]
    refused = _rate(url, answer_id, "down")
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 20
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "TUNEDESK_FEEDBACK_PER_MINUTE" in error["message"]
    assert _rate(url, answer_id, "down", key="wrong").status_code == 401  # the key is checked first
    monkeypatch.setenv("TUNEDESK_FEEDBACK_PER_MINUTE", "lots")
    with pytest.raises(ValueError, match="positive number"):
        feedback_per_minute()


def test_prompts_too_long_are_a_400_naming_messages_and_count_against_no_version(served):
    """A client pasting huge prompts must not roll a good release back: its 400 is the
    client's, counted as neither an answer nor an error of the version that would answer."""
    server, url = served
    book = AliasBook(server.shelf())
    book.set(
        "support-bot", {"a": 50, "b": 50}, by="ana", auto_rollback={**POLICY, "min_requests": 3}
    )
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
    pasted = [{"role": "user", "content": "where is my order " * 400}]  # past 256 positions
    for i, (model, stream) in enumerate([("support-bot", False), ("support-bot", True)] * 4):
        with pytest.raises(openai.BadRequestError) as refused:
            got = client.chat.completions.create(
                model=model, messages=pasted, max_tokens=4, user=f"u{i}", stream=stream
            )
            list(got)
        assert refused.value.body["param"] == "messages"
        assert refused.value.body["code"] == "context_length_exceeded"
        assert re.fullmatch(
            r"the conversation is \d{4} tokens; this model reads at most 256: shorten the "
            "message or clear the chat",
            refused.value.body["message"],
        ), refused.value.body
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="a", messages=pasted, max_tokens=4)
    assert server.stats.counts("a") == server.stats.counts("b") == (0, 0)
    assert ask(url, "u-short")[0] == 200  # an answer still counts
    assert sum(server.stats.counts(v)[0] for v in ("a", "b")) == 1
    assert book.get("support-bot") == {"a": 50, "b": 50}
