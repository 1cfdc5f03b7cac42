"""ui/views/knowledge_warm.py: the Knowledge tab keeps and forgets warm-ups through the API
server's own keeper; a bad model or knowledge is a sentence and nothing is kept; the table says
what the last replay did (here: llama-server does not serve, so the replay says why)."""

from __future__ import annotations

import pytest
from run_helpers import wait_until
from serve_helpers import put_adapters

from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from ui.views import knowledge_warm as view


@pytest.fixture
def keeper(home, varied_dir):
    from feedback.store import FeedbackStore
    from inference.session import ModelSession
    from serve.engines import Engines
    from serve.openai_api import OpenAIServer

    put_adapters(home, varied_dir)
    engines = Engines(ModelSession(str(varied_dir), dtype="float32"), "pytorch")
    server = OpenAIServer(engines, None, FeedbackStore())
    server.router()
    KnowledgeShelf().add("faq", [Passage("Refunds", "Refunds take 5 days.", "kb.md#R")], ["kb.md"])
    return server.warm_keeper


def test_keep_list_and_forget_a_warm_up(keeper):
    assert view.kept_table(keeper) == []
    said = view.keep_warm(keeper, " a ", "faq", 50.0)
    assert said.startswith("Kept: a reads faq knowledge")
    wait_until(lambda: keeper.last, "the replay the keep started", timeout=60)
    [row] = view.kept_table(keeper)
    assert row[:3] == ["a", "faq", 50]
    assert "did not run: warming needs llama-server" in row[4]  # the engine is pytorch here
    assert view.forget_warm(keeper, "a").startswith("Forgot a's warm-up")
    assert view.kept_table(keeper) == []


@pytest.mark.parametrize(
    ("model", "knowledge", "most", "said"),
    [
        ("", "faq", None, "Name the model or alias"),
        ("zz", "faq", None, "no model named 'zz' here"),
        ("a", "gone", None, "gone"),
        ("a", "faq", 1.5, r"Passages at most must be a whole number \(0 or blank: all\), not 1.5"),
        ("a", "faq", -3, r"Passages at most must be a whole number \(0 or blank: all\), not -3"),
    ],
)
def test_a_warm_up_that_cannot_run_is_a_sentence_and_nothing_is_kept(
    keeper, model, knowledge, most, said
):
    with pytest.raises(ValueError, match=said):
        view.keep_warm(keeper, model, knowledge, most)
    assert view.kept_table(keeper) == []
    with pytest.raises(ValueError, match="No warm-up is kept for 'a'"):
        view.forget_warm(keeper, "a")


def test_without_the_api_server_the_tab_says_so():
    assert view.kept_table(None) == []
    with pytest.raises(ValueError, match="make run"):
        view.keep_warm(None, "a", "auto", None)
