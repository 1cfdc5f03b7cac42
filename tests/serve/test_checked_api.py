"""serve/answer_check.py through the API: an alias with ``check: on`` sends an answer of the
wrong intent as the nearest past answer of the asked intent, and says so; ``off`` leaves it."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_helpers import api_app, serving

from adapters.shelf.aliases import AliasBook
from feedback.store import FeedbackStore
from knowledge.answer_check import checker_for
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs
from serve.engines import Engines

ASKED = "I need to change the shipping address on my order"
ADDRESS = "To change the shipping address, open the order page and edit the delivery address."
# Cancel rows outnumber the others, so an answer in none of these words reads as a cancellation.
ROWS = [
    ("change the shipping address of my order", ADDRESS, "address"),
    ("wrong delivery address", "Edit the delivery address from the order page.", "address"),
    ("where is my refund", "The refund reaches your card within five days.", "refund"),
    ("I want my money back", "We issued the refund; it reaches your card soon.", "refund"),
    *[
        (f"cancel order {i}", f"Order {i} is cancelled; nothing is charged.", "cancel")
        for i in range(6)
    ],
]


@pytest.fixture
def served(session, home):
    q, a, y = zip(*ROWS, strict=True)
    version = shelve_pairs(
        list(q), list(a), dataset_fingerprint="f", data_path="faq.csv", intents=list(y)
    )
    manifest_path = home / "adapters" / "a" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["knowledge"] = {"name": version.name, "version": version.version, "split": "train"}
    manifest_path.write_text(json.dumps(manifest))
    with serving(api_app(Engines(session, "pytorch"))) as url:
        book = AliasBook()
        # Ungrounded: the check alone is under test (a grounded alias whose knowledge is deleted
        # is refused in a sentence: tests/serve/test_alias_grounding_api.py).
        book.set(
            "checked-bot",
            {"a": 100},
            by="test",
            force=True,
            reason="tiny",
            check="on",
            grounding="off",
        )
        book.set("plain-bot", {"a": 100}, by="test", force=True, reason="tiny", grounding="off")
        book.set("grounded-bot", {"a": 100}, by="test", force=True, reason="tiny")
        yield url, version


def ask(url, model, stream=False):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": ASKED}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": stream,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def streamed_text(response) -> str:
    parts = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            delta = json.loads(line[6:])["choices"]
            parts += [c["delta"].get("content") or "" for c in delta]
    return "".join(parts)


def test_a_wrong_answer_is_sent_as_the_nearest_past_answer_when_the_alias_checks(served):
    url, version = served
    plain = ask(url, "plain-bot")
    assert plain.status_code == 200, plain.text
    said = plain.json()["choices"][0]["message"]["content"]
    checker, _ = checker_for(version)
    # The premise: the tiny model's answer is not about the address the customer asked about.
    assert checker.questions.predict([ASKED]) == ["address"]
    assert checker.answers.predict([said]) != ["address"] and said != ADDRESS
    assert "tunedesk_check" not in plain.json() and "X-TuneDesk-Check" not in plain.headers

    answer = ask(url, "checked-bot")
    body = answer.json()
    assert body["choices"][0]["message"]["content"] == ADDRESS
    assert body["tunedesk_check"]["outcome"] == "re-answered"
    assert body["tunedesk_check"]["passage_id"] == 1
    assert answer.headers["X-TuneDesk-Check"].startswith("re-answered; asked=address")
    stored = FeedbackStore().answer(body["id"])
    assert stored.extra["check"]["outcome"] == "re-answered"
    assert FeedbackStore().answer(plain.json()["id"]).extra.get("check") is None

    stream = ask(url, "checked-bot", stream=True)
    assert stream.headers["X-TuneDesk-Check"].startswith("re-answered")
    assert streamed_text(stream) == ADDRESS
    # the finish chunk carries the outcome too, read by the openai package as a client would
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="checked-bot",
            messages=[{"role": "user", "content": ASKED}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
    )
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finish.model_extra["tunedesk_check"]["outcome"] == "re-answered"
    assert finish.model_extra["tunedesk_check"]["passage_id"] == 1
    assert not any("tunedesk_check" in (c.model_extra or {}) for c in chunks if c is not finish)
    assert streamed_text(ask(url, "plain-bot", stream=True)) == said


def test_a_knowledge_version_deleted_since_leaves_the_answer_and_says_why(served):
    url, version = served
    said = ask(url, "plain-bot").json()["choices"][0]["message"]["content"]
    KnowledgeShelf().delete(version.name)
    body = ask(url, "checked-bot").json()
    assert body["choices"][0]["message"]["content"] == said
    assert body["tunedesk_check"]["outcome"] == "skipped"
    assert "no knowledge base named" in body["tunedesk_check"]["note"]


def test_a_grounded_alias_on_a_model_of_256_positions_still_answers(served):
    """The passages get only the room the model's own context leaves (counted in its tokens):
    the tiny model reads 256 positions, far fewer than a llama-server slot's 2,048."""
    url, _ = served
    answer = ask(url, "grounded-bot")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]


def text_tokens(session, text: str) -> int:
    """``text``'s length in the model's tokens (as an answer's count: no end-of-turn token)."""
    return len(session.tokenizer(text, add_special_tokens=False)["input_ids"])


def streamed_ends(response) -> tuple[str | None, dict | None]:
    """(the finish chunk's finish_reason, the usage chunk's usage) of a streamed answer."""
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line[:7] == "data: {"]
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    return finish[-1], next((c["usage"] for c in chunks if c.get("usage")), None)


def test_a_replaced_answer_ends_and_counts_as_the_text_sent(served, session):
    """A re-answered or handed-off answer is a whole text of its own: it ends with "stop" and
    counts its own tokens, not the cut generated answer's (a client seeing "length" would take
    it for cut); an unchanged answer keeps the generated counts."""
    url, _ = served
    plain = ask(url, "plain-bot").json()
    # the premise: the tiny model's answer runs to max_tokens
    assert (plain["choices"][0]["finish_reason"], plain["usage"]["completion_tokens"]) == (
        "length",
        8,
    )
    prompt = plain["usage"]["prompt_tokens"]
    sent = {"prompt_tokens": prompt, "completion_tokens": text_tokens(session, ADDRESS)}
    sent["total_tokens"] = prompt + sent["completion_tokens"]
    assert sent["completion_tokens"] != 8

    body = ask(url, "checked-bot").json()
    assert body["tunedesk_check"]["outcome"] == "re-answered"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == sent
    stream = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "checked-bot",
            "messages": [{"role": "user", "content": ASKED}],
            "max_tokens": 8,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=120,
    )
    assert streamed_text(stream) == ADDRESS
    assert streamed_ends(stream) == ("stop", sent)


def test_a_handed_off_answer_ends_and_counts_as_the_hand_off_sentence(served, session):
    from knowledge.answer_check import HANDOFF

    url, _ = served
    body = {
        "model": "checked-bot",
        "messages": [{"role": "user", "content": " "}],  # no words: no intent to check against
        "max_tokens": 8,
        "temperature": 0,
    }
    plain = httpx.post(f"{url}/v1/chat/completions", json={**body, "model": "plain-bot"}).json()
    assert plain["choices"][0]["finish_reason"] == "length"
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
    assert answer["tunedesk_check"]["outcome"] == "handed off"
    assert answer["choices"][0]["message"]["content"] == HANDOFF
    assert answer["choices"][0]["finish_reason"] == "stop"
    prompt = plain["usage"]["prompt_tokens"]
    assert answer["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": text_tokens(session, HANDOFF),
        "total_tokens": prompt + text_tokens(session, HANDOFF),
    }
    stream = httpx.post(
        f"{url}/v1/chat/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        timeout=120,
    )
    assert streamed_text(stream) == HANDOFF
    assert streamed_ends(stream) == ("stop", answer["usage"])


def test_an_answer_the_check_skips_keeps_its_own_end_and_counts(served):
    url, version = served
    plain = ask(url, "plain-bot").json()
    KnowledgeShelf().delete(version.name)
    body = ask(url, "checked-bot").json()
    assert body["tunedesk_check"]["outcome"] == "skipped"
    assert body["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert body["usage"] == plain["usage"]
