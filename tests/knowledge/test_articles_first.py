"""An article labelled with an intent is the team's current word on it: imported from Markdown
(``<!-- intent: NAME -->``) or a title/body/intent table, shown before the intent's past
answers, and what the check before sending re-answers with. The story is a policy change:
past answers say one thing, the team's updated article another."""

from __future__ import annotations

import pytest

from knowledge import actions
from knowledge.answer_check import check_answer
from knowledge.grounding import ground
from knowledge.importers import read_passages
from knowledge.routing import routed_search
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs

OLD = "Returns are accepted within 30 days of delivery; print the label from the order page."
ROWS = [
    ("how do I return an item", OLD, "return_item"),
    (
        "can I send back the shoes I bought",
        "Send them back within 30 days of delivery.",
        "return_item",
    ),
    ("return policy for a jacket", "You may return it within 30 days, unworn.", "return_item"),
    ("cancel my order", "Your order is cancelled; nothing is charged.", "cancel_order"),
    ("please cancel the order I placed", "We cancelled that order.", "cancel_order"),
    ("I no longer want this order, cancel it", "The order is cancelled.", "cancel_order"),
    ("where is my parcel", "Track the parcel from the link in your shipping email.", "track_order"),
    ("track my order", "The tracking link is in your shipping email.", "track_order"),
    (
        "my package has not arrived",
        "Follow the tracking link in the shipping email.",
        "track_order",
    ),
]
HELP_CENTER = """# Help center

## Returning an item

<!-- intent: return_item -->

Since 1 December returns are free for 60 days after delivery: start one in the app under Orders.

## Shipping times

Orders ship within two working days.
"""


@pytest.fixture
def shelf(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    q, a, y = zip(*ROWS, strict=True)
    shelve_pairs(
        list(q), list(a), dataset_fingerprint="f1", data_path="shop.csv", shelf=shelf,
        intents=list(y),
    )  # fmt: skip
    (tmp_path / "help.md").write_text(HELP_CENTER, encoding="utf-8")
    (tmp_path / "past.csv").write_text(
        "question,answer,intent\n" + "".join(f'"{q}","{a}",{y}\n' for q, a, y in ROWS),
        encoding="utf-8",
    )
    return shelf


def test_markdown_and_tables_label_articles_with_their_intent(tmp_path):
    (tmp_path / "help.md").write_text(HELP_CENTER, encoding="utf-8")
    returning, shipping = read_passages(tmp_path / "help.md")
    assert (returning.kind, returning.intent) == ("article", "return_item")
    assert "intent:" not in returning.text and returning.text.startswith("Since 1 December")
    assert shipping.intent == ""
    (tmp_path / "faq.csv").write_text(
        "title,body,intent\nReturns,Free returns for 60 days.,return_item\n", encoding="utf-8"
    )
    (row,) = read_passages(tmp_path / "faq.csv")
    assert (row.kind, row.title, row.intent) == ("article", "Returns", "return_item")


def test_the_updated_article_is_shown_before_the_past_answers(shelf, tmp_path):
    actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop", shelf=shelf)
    asked = [{"role": "user", "content": "can I return the jacket I bought"}]
    messages, grounding = ground(asked, "shop", shelf=shelf, k=2)
    first, second = (p for _, p in grounding.shown)
    assert (first.kind, first.intent) == ("article", "return_item")
    assert second.kind == "past_answer" and "30 days" in second.text
    system = messages[0]["content"]
    assert system.index("60 days") < system.index("30 days")
    assert grounding.record()["intent"] == "return_item"
    assert grounding.line().endswith("(the article about return_item)")
    # Without the label the same article stays behind the past answers, as BM25 ranks it.
    (tmp_path / "help.md").write_text(HELP_CENTER.replace("<!-- intent: return_item -->", ""))
    actions.import_files([tmp_path / "help.md"], "shop", shelf=shelf)
    _, plain = ground(asked, "shop", shelf=shelf, k=1)
    assert plain.shown[0][1].kind == "past_answer"
    assert plain.line().endswith("(past answers about return_item)")


def test_an_article_that_shares_no_word_with_the_question_still_comes_first(shelf, tmp_path):
    actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop", shelf=shelf)
    version = shelf.get("shop")
    question = "send back the shoes please"  # no word of the article's title or text
    assert not any(h.passage.kind == "article" for h in version.search(question, 20))
    found = routed_search(version, question, 1)
    assert found.intent == "return_item"
    assert found.hits[0].passage.title == "Returning an item" and found.hits[0].score == 0.0
    # Other intents are untouched: their past answers come first, and no article is forced in.
    other = routed_search(version, "where is my parcel", 2)
    assert other.intent == "track_order"
    assert other.hits and {h.passage.kind for h in other.hits} == {"past_answer"}


def test_the_check_re_answers_with_the_article_not_the_old_policy(shelf, tmp_path):
    actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop", shelf=shelf)
    result = check_answer(
        "how do I return an item", "Your order is cancelled; nothing is charged.", "shop",
        shelf=shelf,
    )  # fmt: skip
    assert (result.outcome, result.asked) == ("re-answered", "return_item")
    assert "60 days" in result.text and "30 days" not in result.text
    article_id = next(i for i, p in shelf.get("shop").articles_of("return_item"))
    assert result.passage_id == article_id
    # The shelf trained beside the adapter has no article: it re-answers with a past answer.
    again = check_answer(
        "how do I return an item", "Your order is cancelled.", "answers-shop", shelf=shelf
    )
    assert again.outcome == "re-answered" and again.text == OLD


def test_the_search_command_says_which_passage_is_shown_first_and_why(home, tmp_path, capsys):
    from knowledge.__main__ import main

    (tmp_path / "help.md").write_text(HELP_CENTER, encoding="utf-8")
    (tmp_path / "past.csv").write_text(
        "question,answer,intent\n" + "".join(f'"{q}","{a}",{y}\n' for q, a, y in ROWS),
        encoding="utf-8",
    )
    assert (
        main(["import", str(tmp_path / "past.csv"), str(tmp_path / "help.md"), "--name", "shop"])
        == 0
    )
    capsys.readouterr()
    assert main(["search", "can I return the jacket I bought", "--name", "shop", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "shop v1: 2 passage(s), routed to return_item"
    first, second = [line for line in out.splitlines() if line.startswith("#")]
    assert first.endswith("article  help.md#Returning an item  (the intent's article: shown first)")
    assert "past_answer" in second and "shown first" not in second


def test_a_search_not_routed_shows_the_article_of_its_best_past_answers_intent(shelf, tmp_path):
    actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop", shelf=shelf)
    version = shelf.get("shop")
    question = "print the label"  # the classifier is unsure between intents: not routed
    found = routed_search(version, question, 2)
    assert found.intent == "" and "uncertain" in found.note
    assert version.search(question, 1)[0].passage.intent == "return_item"  # a past answer
    assert found.hits[0].passage.title == "Returning an item"
    assert found.hits[1].passage.kind == "past_answer"
    # Asked not to route, the search stays BM25's own.
    plain = routed_search(version, question, 1, route=False)
    assert plain.hits[0].passage.kind == "past_answer"


def test_an_import_says_when_a_label_matches_no_past_answers_intent(shelf, tmp_path):
    typo = HELP_CENTER.replace("intent: return_item", "intent: retrun_item")
    (tmp_path / "help.md").write_text(typo, encoding="utf-8")
    said = actions.import_files([tmp_path / "past.csv", tmp_path / "help.md"], "shop", shelf=shelf)
    assert said.endswith(
        " 1 label(s) match no past answer's intent here, so those articles are shown as "
        "unlabelled ones are: retrun_item ('Returning an item'). Check the spelling against the "
        "data's intents, or import past answers of those intents."
    )
    assert routed_search(shelf.get("shop"), "send back the shoes please", 1).hits[
        0
    ].passage.kind == ("past_answer")
    alone = actions.import_files([tmp_path / "help.md"], "articles", shelf=shelf)
    assert "take effect beside past answers of that intent, and articles v1 has none" in alone
    (tmp_path / "help.md").write_text(HELP_CENTER, encoding="utf-8")
    fixed = actions.import_files([tmp_path / "help.md"], "shop", shelf=shelf)
    assert fixed.startswith("Imported 2 passage(s)") and fixed.endswith(").")


def test_the_list_command_shows_each_passages_label_from_an_offset(home, tmp_path, capsys):
    from knowledge.__main__ import main

    (tmp_path / "help.md").write_text(HELP_CENTER, encoding="utf-8")
    assert main(["import", str(tmp_path / "help.md"), "--name", "kb"]) == 0
    capsys.readouterr()
    assert main(["list", "kb", "--version", "v1", "--offset", "0", "--limit", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "kind", "intent", "title", "source"]
    assert lines[1].split()[:3] == ["1", "article", "return_item"]
    assert lines[2].split()[:3] == ["2", "article", "-"]
    assert main(["list", "kb", "--version", "v1", "--offset", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "2"
    assert main(["list", "kb", "--version", "v1", "--offset", "2"]) == 0
    assert capsys.readouterr().out == "kb v1 holds no passages after the first 2.\n"
    assert main(["list", "kb", "--version", "v1", "--offset", "-1"]) == 2
    assert "--offset must be from 0" in capsys.readouterr().err
