"""knowledge/index.py: FTS5 with bm25() ranks the right passage first; queries are words only."""

from __future__ import annotations

import sqlite3

import pytest

from knowledge import index
from knowledge.passages import Passage

CORPUS = [
    Passage(
        "Refund policy",
        "Refunds are paid within 30 days of the return reaching us.",
        "kb.md#Refund",
    ),
    Passage(
        "Change the shipping address",
        "Open My Orders, pick the order and edit the delivery address.",
        "kb.md#Address",
        "article",
    ),
    Passage(
        "Reset password", "Use the forgot password link on the sign-in page.", "kb.md#Password"
    ),
    Passage(
        "cancel order",
        "Cancel it from My Orders before it ships.",
        "faq.csv:row 1",
        "past_answer",
        "how do I cancel my order",
    ),
]


@pytest.fixture
def built(tmp_path):
    path = tmp_path / "index.sqlite"
    index.build(path, CORPUS)
    return path


def test_fts5_is_here():
    assert index.fts5_available()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("I need to change the shipping address on my order", 2),
        ("when do I get my refund", 1),
        ("forgot my password", 3),
        ("please cancel the order I placed", 4),
    ],
)
def test_bm25_ranks_the_right_passage_first(built, query, expected):
    hits = index.search(built, query, k=3)
    assert hits[0].id == expected
    assert hits[0].passage == CORPUS[expected - 1]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_query_syntax_is_never_read(built):
    # FTS5 operators, quotes and a column filter typed by a customer are just words
    assert index.match_expression('refund" OR title:* NEAR(') == '"refund" OR "title" OR "near"'
    assert index.search(built, 'refund" OR title:* NEAR(', 2)[0].id == 1
    assert index.search(built, "?!", 3) == []


def test_stopwords_go_unless_nothing_else_is_asked():
    assert index.match_expression("how do I get my refund") == '"how" OR "get" OR "refund"'
    assert index.match_expression("do I") == '"do" OR "i"'


def test_passages_and_by_ids_read_back_in_order(built):
    assert [i for i, _ in index.passages(built)] == [1, 2, 3, 4]
    assert [p for _, p in index.passages(built, offset=1, limit=2)] == CORPUS[1:3]
    assert index.by_ids(built, [4, 9]) == {4: CORPUS[3]}


def test_search_opens_read_only(built):
    with pytest.raises(sqlite3.OperationalError):
        index.search(built.parent / "missing.sqlite", "refund")
    assert not (built.parent / "missing.sqlite").exists()


def test_an_intents_articles_are_looked_up_by_index_not_by_reading_every_passage(tmp_path):
    path = tmp_path / "index.sqlite"
    labelled = Passage("Refund policy", "60 days.", "kb.md#Refund", "article", "", "refund")
    index.build(path, [*CORPUS, labelled])
    assert index.articles_of(path, "refund") == [(5, labelled)]
    with sqlite3.connect(path) as db:
        plan = " ".join(
            row[-1]
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM passages "
                "WHERE intent = ? AND kind != 'past_answer' ORDER BY id",
                ("refund",),
            )
        )
    assert "passages_by_intent" in plan and "SCAN passages" not in plan, plan
