"""The Review tab: the queue under filters, accept / drop / correct by id, export; bad input
answered in a sentence."""

from __future__ import annotations

import pytest
from ui_handlers import handlers

from feedback.store import FeedbackStore
from ui.views import review as view

ASKED = [{"role": "user", "content": "Where is my parcel?"}]


def test_the_queue_is_reviewed_and_exported_from_the_tab(home, tiny_llama_dir):
    store = FeedbackStore(log_conversations=True)
    store.record("c1", "support", "aaaa1111bbbb", "llama.cpp q8_0", ASKED, "No idea.")
    store.record("c2", "base", "cccc2222dddd", "pytorch", ASKED, "It ships today.")
    down, up = store.rate("c1", "down", "It arrives Friday."), store.rate("c2", "up")
    table = handlers(tiny_llama_dir)
    rows, choices = table["show_queue"](view.ANY, view.ANY, "new", "", "")
    assert [r[0] for r in rows] == [up["id"], down["id"]] and choices["choices"][1:] == ["base", "support"]
    assert rows[1][4:] == ["support", "aaaa1111", "Where is my parcel?", "No idea.", "It arrives Friday."]
    assert [r[0] for r in view.table("support", "down", view.ANY, "", "")] == [down["id"]]
    assert view.act(down["id"], None, "It arrives on Friday.") == f"{down['id']}: new (correction saved)"
    assert view.act(down["id"], "accepted", None) == f"{down['id']}: accepted"
    assert view.act(up["id"], "dropped", None) == f"{up['id']}: dropped"
    assert view.table(view.ANY, view.ANY, "new", "", "") == []
    said = table["on_export_feedback"]("from-review")
    assert said.startswith("1 SFT rows") and (home / "datasets" / "from-review.jsonl").is_file()
    for row_id, status, words in [("", "accepted", "pick a rating first"), ("fb-nope", "accepted", "no rating"),
                                  (down["id"], "maybe", "unknown status")]:
        with pytest.raises(ValueError, match=words):
            view.act(row_id, status, None)
    with pytest.raises(ValueError, match="dataset name"):
        view.export_accepted("../x")
