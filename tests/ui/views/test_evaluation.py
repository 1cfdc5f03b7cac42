"""The Evaluate tab's slice choice: the default column is used where the data has it."""

from __future__ import annotations

import json

from ui.views.evaluation import NO_SLICE, slice_column


def test_default_intent_slices_where_the_data_has_it_and_says_so_where_not(tmp_path):
    with_intent = tmp_path / "with.jsonl"
    with_intent.write_text(json.dumps({"prompt": "a", "response": "b", "intent": "refund"}) + "\n")
    without = tmp_path / "without.jsonl"
    without.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    assert slice_column("intent", str(with_intent)) == ("intent", "")
    assert slice_column("intent", str(without)) == (None, "Not sliced: the data has no `intent` column.")
    assert slice_column(NO_SLICE, str(with_intent)) == (None, "")
    # a column the user typed is passed on: evaluate() refuses it naming the file's columns
    assert slice_column("topic", str(without)) == ("topic", "")
    # an unreadable file is left to evaluate(), which says what is wrong with it
    assert slice_column("intent", str(tmp_path / "missing.jsonl")) == ("intent", "")
