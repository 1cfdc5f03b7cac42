"""ui/views/chat_grounding.py and Chat: an adapter's answers are grounded in the knowledge it was
trained beside (auto), any model in a chosen knowledge base, none with off; Chat says what the
answer was shown ("answered from: ...")."""

from __future__ import annotations

import json

import pytest
from serve_helpers import put_adapters
from ui_handlers import handlers, last

from adapters.shelf.store import Shelf
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from ui.views import chat_grounding as view
from ui.views.state import BASE_LABEL

ADDRESS = Passage(
    "change address",
    "Open My Orders and edit the delivery address.",
    "faq:row 1",
    "past_answer",
    "how do I change the shipping address of my order",
)
ASKED = [{"role": "user", "content": "I need to change the shipping address on my order"}]


@pytest.fixture
def trained_beside(home, tiny_llama_dir):
    """Adapter ``a`` whose manifest names knowledge ``answers-demo`` v1; ``b`` names none."""
    KnowledgeShelf().add("answers-demo", [ADDRESS], ["demo.jsonl"])
    put_adapters(home, tiny_llama_dir, names=("a", "b"))
    manifest_path = home / "adapters" / "a" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["knowledge"] = {"name": "answers-demo", "version": "v1", "split": "train"}
    manifest_path.write_text(json.dumps(manifest))
    return Shelf()


def test_auto_uses_the_adapters_own_knowledge(trained_beside):
    messages, line, record = view.grounded(
        ASKED, trained_beside, "a", view.AUTO, "You are Acme support."
    )
    assert record["knowledge"] == "answers-demo" and record["passage_ids"] == [1]
    assert line == 'answered from: answers-demo v1 #1 "change address"'
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith(
        "You are Acme support."
    )
    assert "Open My Orders and edit the delivery address." in messages[0]["content"]
    assert view.grounded(ASKED, trained_beside, "b", view.AUTO) == (ASKED, "", None)
    assert view.grounded(ASKED, trained_beside, None, view.AUTO) == (ASKED, "", None)
    assert view.grounded(ASKED, trained_beside, "a", view.OFF) == (ASKED, "", None)
    assert view.grounded(ASKED, trained_beside, None, "answers-demo")[1].startswith("answered from")
    assert view.choices() == [view.AUTO, view.OFF, "answers-demo"]


def test_a_deleted_knowledge_version_answers_ungrounded_with_a_sentence(trained_beside):
    KnowledgeShelf().delete("answers-demo")
    messages, line, record = view.grounded(ASKED, trained_beside, "a", view.AUTO)
    assert record is None
    assert messages == ASKED
    assert line.startswith("answered without knowledge: no knowledge base named 'answers-demo'")


def test_chat_says_what_the_answer_was_shown(trained_beside, tiny_llama_dir):
    table = handlers(tiny_llama_dir)
    history = last(table["respond"]([], ASKED[0]["content"], "a", "", 8, 0, 0.9, 1.0, 0))[0]
    assert [m["role"] for m in history] == ["user", "assistant"]
    _, line = table["on_answered"](history, "a", "", 8)
    assert line == 'answered from: answers-demo v1 #1 "change address"'
    assert table["on_answered"](history, BASE_LABEL, "")[1] == ""


def test_a_rating_keeps_the_knowledge_its_answer_was_shown(trained_beside, tiny_llama_dir):
    from feedback.store import FeedbackStore

    table = handlers(tiny_llama_dir)
    state = table["engine"]
    history = last(table["respond"]([], ASKED[0]["content"], "a", "", 8, 0, 0.9, 1.0, 0))[0]
    said = state.rate_answer(history, 1, "down", "a", "Open My Orders.", system="")
    assert said.startswith("Saved 👎")
    (row,) = FeedbackStore().ratings()
    assert row["grounding"]["knowledge"] == "answers-demo" and row["grounding"]["version"] == "v1"
    assert row["grounding"]["passage_ids"] == [1]
    # an answer of the base model (ungrounded under auto) keeps none
    history = last(table["respond"]([], ASKED[0]["content"], BASE_LABEL, "", 8, 0, 0.9, 1.0, 0))[0]
    state.rate_answer(history, 1, "up", None, system="")
    assert "grounding" not in FeedbackStore().ratings()[-1]


def test_auto_says_when_the_adapters_knowledge_base_has_a_newer_version(trained_beside, tmp_path):
    """Articles imported into the adapter's own knowledge base since training make a newer
    version; auto keeps answering from the trained-beside one, and the line says how to use it."""
    article = tmp_path / "help.md"
    article.write_text("## Changing the address\n\n<!-- intent: change_address -->\n\nCall us.\n")
    from knowledge import actions

    actions.import_files([article], "answers-demo")
    _, line, record = view.grounded(ASKED, trained_beside, "a", view.AUTO)
    assert record["version"] == "v1"
    assert line.endswith(
        ' · answers-demo v2 is newer: choose answers-demo under "Answer from knowledge" to '
        "answer from it"
    )
    _, chosen, _ = view.grounded(ASKED, trained_beside, "a", "answers-demo")
    assert "answers-demo v2" in chosen and "newer" not in chosen
