"""serve/grounding.py through the API: an adapter asked by name is grounded in its own knowledge
unless its ``knowledge`` field says otherwise; the passages go in the prompt the engine answers
(the answer equals the session's on the grounded conversation), and the answer names the
version and passages it was shown."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_helpers import api_app, serving

from inference.generate import GenerationSettings, compare
from knowledge.grounding import ground
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from serve.engines import Engines

ASKED = [{"role": "user", "content": "I need to change the shipping address on my order"}]
ADDRESS = Passage(
    "change address",
    "Open My Orders and edit the delivery address.",
    "faq:row 1",
    "past_answer",
    "how do I change the shipping address of my order",
)
REFUND = Passage("Refunds", "Refunds are paid within 30 days of the return.", "kb.md#Refunds")


@pytest.fixture
def url(session, home):
    KnowledgeShelf().add("faq", [ADDRESS, REFUND], ["faq.csv"])
    manifest_path = home / "adapters" / "a" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["knowledge"] = {"name": "faq", "version": "v1", "split": "train"}
    manifest_path.write_text(json.dumps(manifest))
    with serving(api_app(Engines(session, "pytorch"))) as base_url:
        yield base_url


def ask(url, model, knowledge, stream=False):
    body = {"model": model, "messages": ASKED, "max_tokens": 8, "temperature": 0, "stream": stream}
    if knowledge is not None:
        body["knowledge"] = knowledge
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def test_the_answer_is_the_sessions_on_the_grounded_conversation(url, session):
    grounded, _ = ground(ASKED, "faq", k=2, answer_tokens=8)
    want = compare(session, grounded, ["a"], GenerationSettings(max_new_tokens=8))[0]
    plain = ask(url, "a", "off").json()
    for knowledge in (None, "faq", "auto", {"name": "faq", "version": "v1", "k": 2}):
        answer = ask(url, "a", knowledge)
        body = answer.json()
        assert body["choices"][0]["message"]["content"] == want.text
        assert body["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]
        assert body["tunedesk_grounding"]["passage_ids"] == [1]
        assert body["tunedesk_grounding"]["version"] == "v1"
        assert answer.headers["X-TuneDesk-Knowledge"] == "faq v1 passages=1"
    for off in ("off", False):  # asked ungrounded
        assert "X-TuneDesk-Knowledge" not in ask(url, "a", off).headers
    assert "tunedesk_grounding" not in plain
    b = ask(url, "b", None)  # trained beside no knowledge: ungrounded, as before
    assert b.status_code == 200 and "tunedesk_grounding" not in b.json()
    streamed = ask(url, "a", "faq", stream=True)
    assert streamed.headers["X-TuneDesk-Knowledge"] == "faq v1 passages=1"


@pytest.mark.parametrize(
    ("model", "knowledge", "said"),
    [
        ("base", "auto", "the base model has none"),
        ("b", "auto", "b has none"),
        ("a", "gone", "no knowledge base named 'gone'"),
        ("a", {"name": "faq", "version": "v9"}, "faq has no version 'v9'"),
        ("a", {"name": "faq", "k": 9}, "'knowledge.k' must be a whole number from 1 to 5"),
        ("a", {"name": "faq", "top": 1}, "unknown field knowledge.top"),
        ("a", 7, "'knowledge' must be a knowledge base's name"),
    ],
)
def test_bad_knowledge_is_a_400_naming_it(url, model, knowledge, said):
    answer = ask(url, model, knowledge)
    assert answer.status_code == 400 and said in answer.json()["error"]["message"]
    assert answer.json()["error"]["param"].startswith("knowledge")


def test_a_deleted_version_is_said(url):
    KnowledgeShelf().delete("faq")
    answer = ask(url, "a", "auto")
    assert (
        answer.status_code == 400
        and "no knowledge base named 'faq'" in answer.json()["error"]["message"]
    )
    unasked = ask(url, "a", None)  # not asked for: answered as it is
    assert unasked.status_code == 200 and "tunedesk_grounding" not in unasked.json()


def test_a_rating_keeps_the_knowledge_the_answer_was_shown(url):
    from feedback.store import FeedbackStore

    grounded, plain = ask(url, "a", "faq").json(), ask(url, "a", "off").json()
    for answer in (grounded, plain):
        rated = httpx.post(
            f"{url}/v1/feedback", json={"id": answer["id"], "rating": "down"}, timeout=30
        )
        assert rated.status_code == 200, rated.text
    first, second = FeedbackStore().ratings()
    assert first["grounding"] == grounded["tunedesk_grounding"]
    assert first["grounding"]["passage_ids"] == [1] and "grounding" not in second


def test_a_lone_surrogate_in_knowledge_is_a_400_naming_it(url):
    """The warm-up's check (serve.grounding.parse_knowledge), on a chat request too."""
    raw = (
        '{"model": "a", "messages": [{"role": "user", "content": "hi"}], "knowledge": "faq\\ud800"}'
    )
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        content=raw.encode(),
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "knowledge"
    assert error["message"].startswith("knowledge contains a character that is not valid Unicode")


def test_a_labelled_article_is_what_a_served_answer_is_shown(url, tmp_path):
    """The policy-change story through /v1 and the openai client: past answers say 30 days, the
    team's article labelled with the intent says 60; the article is the passage shown."""
    import openai

    from knowledge import actions

    rows = [
        ("how do I return an item", "Returns are accepted within 30 days.", "return_item"),
        ("can I send back the shoes", "Send them back within 30 days.", "return_item"),
        ("return policy for a jacket", "Return it within 30 days, unworn.", "return_item"),
        ("where is my parcel", "Track it from the link in your email.", "track_order"),
        ("track my order", "The tracking link is in your shipping email.", "track_order"),
        ("my package has not arrived", "Follow the tracking link.", "track_order"),
    ]
    (tmp_path / "past.csv").write_text(
        "question,answer,intent\n" + "".join(f'"{q}","{a}",{y}\n' for q, a, y in rows)
    )
    (tmp_path / "help.md").write_text(
        "## Returns\n\n<!-- intent: return_item -->\n\nReturns are free for 60 days.\n"
    )
    actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop")
    article = next(i for i, _ in KnowledgeShelf().get("shop").articles_of("return_item"))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model="a",
        messages=[{"role": "user", "content": "can I return the jacket I bought"}],
        max_tokens=4,
        temperature=0,
        extra_body={"knowledge": "shop"},
    )
    grounding = answer.model_extra["tunedesk_grounding"]
    assert grounding["passage_ids"] == [article] and grounding["intent"] == "return_item"
