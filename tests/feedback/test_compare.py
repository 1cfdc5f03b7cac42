"""Compare's verdicts in the review queue: a thumbs-down per losing pane with its version, the
winner (or the written answer) as its correction, exported as preference pairs; bad verdicts
refused with nothing written."""

from __future__ import annotations

import json

import pytest

from feedback.compare import rate_compare
from feedback.review import Filter, export, queue, review, training_rows
from feedback.store import MAX_CORRECTION_CHARS, FeedbackStore

ASKED = [{"role": "user", "content": "I am jo@example.com, where is order 88231?"}]
PANES = [
    {
        "adapter": "base",
        "adapter_hash": "base0000hash",
        "text": "Hello hello.",
        "engine": "pytorch float32",
    },
    {"adapter": "support", "adapter_hash": "sup11111hash", "text": "Order [ORDER] ships Monday."},
    {
        "adapter": "support-v2",
        "adapter_hash": "sup22222hash",
        "text": "Mail jo@example.com for that.",
    },
]


def test_a_preferred_pane_makes_pairs_against_each_other_pane(home):
    store = FeedbackStore()
    rows = rate_compare(store, ASKED, PANES, "support", intent="track_order")
    assert [(r["adapter"], r["version"], r["rating"], r["source"]) for r in rows] == [
        ("base", "base0000hash", "down", "compare"),
        ("support-v2", "sup22222hash", "down", "compare"),
    ]
    assert {r["correction"] for r in rows} == {"Order [ORDER] ships Monday."}
    assert {(r["preferred"], r["intent"], r["status"]) for r in rows} == {
        ("support", "track_order", "new")
    }
    assert rows[0]["verdict"] == rows[1]["verdict"] and rows[0]["engine"] == "pytorch float32"
    assert rows[0]["messages"] == [
        {"role": "user", "content": "I am [EMAIL], where is order [ORDER]?"}
    ]
    assert rows[1]["answer"] == "Mail [EMAIL] for that."  # redacted like every kept answer
    assert "example.com" not in json.dumps(store.ratings())
    assert [r["id"] for r in queue(store, Filter(adapter="support-v2", intent="track_order"))] == [
        rows[1]["id"]
    ]

    for row in rows:
        review(store, row["id"], "accepted")
    sft, pairs = training_rows(store)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        ("Order [ORDER] ships Monday.", "Hello hello."),
        ("Order [ORDER] ships Monday.", "Mail [EMAIL] for that."),
    ]
    assert (
        len(sft) == 1 and sft[0]["response"] == "Order [ORDER] ships Monday."
    )  # one verdict, one SFT row
    assert sft[0]["intent"] == pairs[0]["intent"] == "track_order"
    _, pair_file, n_sft, n_pairs = export(store, home / "datasets", "compare")
    assert (n_sft, n_pairs) == (1, 2)
    assert json.loads(pair_file.read_text().splitlines()[0])["prompt"] == rows[0]["messages"]


def test_a_written_answer_beats_every_pane_and_a_pane_saying_it_is_skipped(home):
    store = FeedbackStore()
    panes = [
        *PANES[:2],
        {"adapter": "copy", "adapter_hash": "c", "text": " Your parcel arrives Friday. "},
    ]
    rows = rate_compare(store, ASKED, panes, "support", correction="Your parcel arrives Friday.")
    assert [r["adapter"] for r in rows] == ["base", "support"]  # "copy" said the written answer
    assert {(r["correction"], r["preferred"]) for r in rows} == {
        ("Your parcel arrives Friday.", None)
    }
    same = [{**PANES[0], "text": "Same."}, {**PANES[1], "text": "Same."}]
    assert rate_compare(store, ASKED, same, "support") == []  # nothing to prefer: no row
    assert len(store.ratings()) == 2


def test_bad_verdicts_are_refused_and_nothing_is_written(home):
    store = FeedbackStore()
    for panes, preferred, correction, intent, words in [
        ([], "base", "", None, "pick the better answer"),
        (PANES, "nobody", "", None, "pick the better answer"),
        (PANES, None, "", None, "pick the better answer"),
        (PANES, None, "x" * (MAX_CORRECTION_CHARS + 1), None, "at most"),
        (PANES, "base", "", "a\nb", "one line"),
        (PANES, "base", "", 7, "intent must be a string"),
    ]:
        with pytest.raises(ValueError, match=words):
            rate_compare(store, ASKED, panes, preferred, correction, intent)
    assert store.ratings() == []
