"""bench/knowledge_retrieval.py: the hit rates are counted from real searches of a made-up table."""

from __future__ import annotations

import csv

from bench.knowledge_retrieval import main, measure

WORDS = {
    "track_order": "parcel tracking",
    "get_refund": "money back refund",
    "cancel_order": "cancel",
}


def rows(n: int) -> list[dict]:
    intents = list(WORDS)
    return [
        {
            "instruction": f"please {WORDS[intents[i % 3]]} {i}",
            "intent": intents[i % 3],
            "response": f"Answer about {WORDS[intents[i % 3]]}.",
        }
        for i in range(n)
    ]


def test_distinct_intents_are_all_found():
    m = measure(rows(60), shelf_rows=30, queries=15, tail=30)
    assert (m["passages"], m["queries"], m["intents_asked"]) == (30, 15, 3)
    assert m["results"]["default"]["top1"] == 1.0 and m["results"]["default"]["top2"] == 1.0


def test_wrong_answers_lower_the_rate(tmp_path):
    table = rows(60)
    for row in table[:30]:  # every shelf answer and question now says another intent's words
        row["intent"] = {
            "track_order": "get_refund",
            "get_refund": "cancel_order",
            "cancel_order": "track_order",
        }[row["intent"]]
    assert measure(table, 30, 15, 30)["results"]["default"]["top1"] == 0.0
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["instruction", "intent", "response"])
        writer.writeheader()
        writer.writerows(rows(20))
    assert main(["--data", str(path), "--shelf-rows", "30", "--tail", "10"]) == 2


def test_the_routed_search_is_measured_beside_bm25():
    table = rows(60)
    for row in table[:30:3]:  # a few shelf questions say a word of another intent
        row["instruction"] += " cancel"
    m = measure(table, shelf_rows=30, queries=15, tail=30)
    routed = m["results"]["routed by the asked intent"]
    assert list(m["results"])[:2] == ["default", "routed by the asked intent"]
    assert routed["routed"] == 1.0 and routed["top1"] == 1.0


def test_articles_are_measured_alone_and_beside_the_past_answers(tmp_path):
    from bench.knowledge_retrieval import article_intents, measure_articles
    from knowledge.passages import Passage

    articles = [
        Passage("Tracking", "Follow your parcel tracking link.", "kb.md#Tracking"),
        Passage("Refunds", "Your money back within days.", "kb.md#Refunds"),
        Passage("Cancelling", "Orders cancel in My Orders.", "kb.md#Cancelling"),
    ]
    intents = {"Tracking": "track_order", "Refunds": "get_refund", "Cancelling": "track_order"}
    m = measure_articles(rows(60), 30, 15, 30, articles, intents)  # "Cancelling" mislabelled
    alone = m["results"]["articles alone"]
    assert m["articles"] == 3 and alone["articles_first"] == 1.0
    assert alone["top1"] == 2 / 3  # the cancel questions find an article of another intent
    beside = m["results"]["past answers + articles, routed"]
    assert beside["top1"] == 1.0 and beside["articles_first"] < 1.0
    path = tmp_path / "intents.json"
    path.write_text('{"Tracking": "track_order"}')
    assert article_intents(str(path)) == {"Tracking": "track_order"}
    assert article_intents(None)["Cancelling an order"] == "cancel_order"  # the demo's titles
