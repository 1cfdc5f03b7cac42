"""ui/views/state.py's dataset preview for the Train tab: the Review tab's preference export
(prompt, chosen, rejected) shows as pairs for DPO / CPO / ORPO, not as unknown columns."""

from __future__ import annotations

import json

import pytest
from ui_handlers import handlers

from feedback.store import FeedbackStore
from ui.views import review
from ui.views.train_actions import DATA_SOURCES
from ui.views.uploads import preview, store_upload

ASKED = [{"role": "user", "content": "I want a refund"}]


def test_the_review_tabs_pair_export_previews_as_preference_pairs(home, tiny_llama_dir):
    store = FeedbackStore(log_conversations=True)
    store.record("c1", "tiny1", "3d065c92b3cb", "pytorch", ASKED, "Sure, happy to assist.")
    row = store.rate("c1", "down", "Refunds take 3-5 days after we receive the item.")
    review.act(row["id"], "accepted", None)
    table = handlers(tiny_llama_dir)
    assert "pairs" in table["on_export_feedback"]("fb1")
    pairs = home / "datasets" / "fb1-pairs.jsonl"
    assert {"prompt", "chosen", "rejected", "adapter"} <= set(json.loads(pairs.read_text()))
    info, frame = table["on_data"](DATA_SOURCES[2], None, str(pairs))
    assert info == (
        "1 preference pair (prompt, chosen, rejected): Method DPO, CPO or ORPO (under Advanced) "
        "trains on them, starting from an adapter on the shelf; SFT needs prompt/response rows"
    )
    shown = frame["value"]
    assert list(shown.columns) == ["prompt", "chosen", "rejected"]
    assert shown.values.tolist() == [
        [
            "I want a refund",
            "Refunds take 3-5 days after we receive the item.",
            "Sure, happy to assist.",
        ]
    ]
    # an upload of the same file is kept, as a path on this machine is previewed
    kept = store_upload(str(pairs))
    assert preview(kept)[2] == info


def test_pairs_a_preference_run_cannot_read_say_why(tmp_path, home):
    broken = tmp_path / "broken-pairs.jsonl"
    broken.write_text(json.dumps({"prompt": "Hi?", "chosen": "Hello.", "rejected": ""}) + "\n")
    with pytest.raises(ValueError, match="line 1: a pair needs prompt"):
        preview(str(broken))
    with pytest.raises(ValueError, match="line 1: a pair needs prompt"):
        store_upload(str(broken))
