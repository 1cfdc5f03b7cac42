"""An alias's grounding through /v1: a request to the alias is grounded as the alias says
(auto: the answering version's own knowledge), a request field that says otherwise is a 400,
and a knowledge version deleted while the alias uses it is a sentence, the alias kept."""

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
RETURNS = Passage("Returns", "Send the parcel back within 30 days of delivery.", "kb.md#Returns")


@pytest.fixture
def url(session, home):
    KnowledgeShelf().add("faq", [ADDRESS], ["faq.csv"])
    KnowledgeShelf().add("kb", [RETURNS, ADDRESS], ["kb.md"])
    path = home / "adapters" / "a" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["knowledge"] = {"name": "faq", "version": "v1", "split": "train"}
    path.write_text(json.dumps(manifest))
    with serving(api_app(Engines(session, "pytorch"))) as base_url:
        put(base_url, {"versions": {"a": 100}, "force": True, "reason": "test"})
        yield base_url


def put(url, body):
    return httpx.put(f"{url}/v1/aliases/bot", json=body, timeout=60)


def ask(url, model="bot", knowledge=None):
    body = {"model": model, "messages": ASKED, "max_tokens": 8, "temperature": 0}
    if knowledge is not None:
        body["knowledge"] = knowledge
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def expected(session, name, version="latest"):
    grounded, _ = ground(ASKED, name, version, answer_tokens=8)
    return compare(session, grounded, ["a"], GenerationSettings(max_new_tokens=8))[0].text


def test_an_alias_grounds_as_it_says(url, session):
    by_auto = ask(url).json()  # no setting: auto, the version's own knowledge
    assert by_auto["tunedesk_grounding"]["knowledge"] == "faq"
    assert by_auto["choices"][0]["message"]["content"] == expected(session, "faq")
    assert ask(url, knowledge="auto").status_code == 200  # the same as the alias: taken
    by_name = ask(url, "a").json()  # the adapter by name, no field: its own knowledge too
    assert by_name["tunedesk_grounding"]["knowledge"] == "faq"
    assert by_name["choices"][0]["message"]["content"] == expected(session, "faq")
    plain = ask(url, "a", "off").json()  # by name, asked ungrounded
    assert "tunedesk_grounding" not in plain

    changed = put(url, {"grounding": "kb@v1"})
    assert changed.status_code == 200 and changed.json()["grounding"] == {
        "from": "auto",
        "to": "kb@v1",
    }
    answer = ask(url)
    assert answer.headers["X-TuneDesk-Knowledge"] == "kb v1 passages=2"
    assert answer.json()["choices"][0]["message"]["content"] == expected(session, "kb", "v1")

    assert put(url, {"grounding": "off"}).status_code == 200
    off = ask(url).json()
    assert "tunedesk_grounding" not in off
    assert off["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    card = httpx.get(f"{url}/v1/aliases/bot", timeout=30).json()
    assert card["grounding"] == "off"
    assert [r["grounding"]["to"] for r in card["history"] if "grounding" in r] == ["kb@v1", "off"]


@pytest.mark.parametrize("field", ["faq", "auto", {"name": "kb", "version": "v1"}])
def test_a_request_may_not_ground_an_alias_otherwise(url, field):
    assert put(url, {"grounding": "off"}).status_code == 200
    answer = ask(url, knowledge=field)
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "knowledge"
    assert "is an alias grounded as it says (off: off)" in error["message"]
    assert ask(url, knowledge="off").status_code == 200  # the same as the alias: taken


def test_a_request_may_not_unground_a_grounded_alias(url):
    answer = ask(url, knowledge="off")  # the alias grounds auto: faq v1
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "knowledge"
    assert "is an alias grounded as it says (auto: faq v1)" in error["message"]


def test_an_unknown_knowledge_version_is_refused_when_set(url):
    answer = put(url, {"grounding": "faq@v7"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "grounding"
    assert "faq has no version 'v7'" in answer.json()["error"]["message"]
    assert httpx.get(f"{url}/v1/aliases/bot", timeout=30).json()["grounding"] == "auto"


def test_a_knowledge_version_deleted_while_in_use_is_said_and_nothing_is_lost(url, home):
    assert put(url, {"grounding": "kb@v1"}).status_code == 200
    KnowledgeShelf().delete("kb", "v1")
    answer = ask(url)
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "model"
    assert error["message"].startswith(
        "alias 'bot' grounds in kb v1, which is not on the "
        "knowledge shelf any more; set its grounding again"
    )
    assert httpx.get(f"{url}/v1/aliases/bot", timeout=30).json()["grounding"] == "kb@v1"
    assert put(url, {"grounding": "faq"}).status_code == 200  # set again: it answers
    assert ask(url).json()["tunedesk_grounding"]["knowledge"] == "faq"


def test_auto_with_the_versions_own_knowledge_deleted_is_said(url):
    KnowledgeShelf().delete("faq")  # what adapter a was trained beside
    answer = ask(url)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "model"
    assert (
        "alias 'bot' grounds in faq v1, which is not on the knowledge shelf any more"
        in (answer.json()["error"]["message"])
    )
    assert ask(url, "a").status_code == 200  # the adapter by name, ungrounded, still answers


def test_an_alias_grounded_in_a_knowledge_base_by_name_serves_its_newest_version(url, session):
    """The team's articles change: imported again, an alias grounded in ``kb`` (no version)
    answers from the new version at the next request; one pinned to kb@v1 stays on v1."""
    assert put(url, {"grounding": "kb"}).status_code == 200
    assert ask(url).headers["X-TuneDesk-Knowledge"] == "kb v1 passages=2"
    updated = Passage("change address", "Write to us with the new address.", "kb.md#Address")
    version, _ = KnowledgeShelf().add("kb", [updated], ["kb.md"], replace=True)
    assert version.version == "v2"
    answer = ask(url)
    assert answer.headers["X-TuneDesk-Knowledge"].startswith("kb v2 passages=")
    assert answer.json()["choices"][0]["message"]["content"] == expected(session, "kb", "v2")
    assert put(url, {"grounding": "kb@v1"}).status_code == 200
    assert ask(url).headers["X-TuneDesk-Knowledge"] == "kb v1 passages=2"
