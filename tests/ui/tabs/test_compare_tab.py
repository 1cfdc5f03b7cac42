"""The Compare tab's verdict: a row of feedback.jsonl as before, and the review queue's
thumbs-down of the pane that lost, with the versions and engine that answered."""

from __future__ import annotations

from shelf_helpers import put_adapter
from ui_handlers import handlers

from feedback.review import training_rows
from feedback.store import FeedbackStore
from ui.tabs.compare import NONE


def test_a_verdict_lands_in_feedback_jsonl_and_in_the_review_queue(home, varied_dir):
    put_adapter(varied_dir, "support")
    table = handlers(varied_dir)
    *panes, info, choice, shown, asked = table["run"](
        "support", NONE, "where is my parcel?", "", 8, 1.0
    )
    assert choice["choices"] == ["base", "support"] and "answers decoded together" in info
    # each answer is labelled with the model that gave it and its version, never "pane N"
    base = f"base model {varied_dir.name} · version {shown[0]['adapter_hash'][:12]}"
    adapter = f"adapter support · version {shown[1]['adapter_hash'][:12]}"
    assert [p["label"].rpartition(" · ")[0] for p in panes[:2]] == [base, adapter]
    assert all(
        p["label"].rpartition(" · ")[2].startswith(("addressed: ", "intent not shown: "))
        for p in panes[:2]
    )
    assert panes[2]["visible"] is False
    # picking adapters names the panes before any answer
    relabelled = table["relabel"]("support", "other")
    assert [p.get("label") for p in relabelled] == [
        f"base model {varied_dir.name}",
        "adapter support",
        "adapter other",
    ]
    assert all(p["value"] == "" for p in relabelled)  # the old answers are not the new picks'
    assert shown[0]["text"] != shown[1]["text"], "the panes must differ for a preference"
    said = table["on_save"](asked, shown, "support", "")
    assert said.startswith("Saved. 1 feedback rows") and "1 rating(s)" in said and "Review" in said
    said = table["on_save"](asked, shown, None, "Your parcel arrives Friday.")
    assert "2 feedback rows" in said and "2 rating(s)" in said
    rows = FeedbackStore().ratings()
    assert [(r["adapter"], r["preferred"], r["correction"]) for r in rows] == [
        ("base", "support", shown[1]["text"]),
        ("base", None, "Your parcel arrives Friday."),
        ("support", None, "Your parcel arrives Friday."),
    ]
    session = table["engine"].session
    assert rows[0]["version"] == session.resolved.weight_hash == shown[0]["adapter_hash"]
    assert rows[2]["version"] == shown[1]["adapter_hash"] and rows[0]["engine"] in info
    assert rows[0]["messages"] == [{"role": "user", "content": "where is my parcel?"}]
    assert table["on_save"](asked, shown, None, "").startswith("⚠️ pick the better answer")
    assert (
        len(FeedbackStore().ratings()) == 3
        and (home / "feedback" / "feedback.jsonl").read_text().count("\n") == 2
    )
    assert training_rows(FeedbackStore()) == ([], [])  # nothing accepted yet


def test_compare_with_no_adapter_picked_says_what_to_pick(home, varied_dir):
    """With no adapter picked (an empty shelf) Compare answered with the base model alone and
    offered it as the only 'better answer', without a word."""
    table = handlers(varied_dir)
    *_, info, choice, _, _ = table["run"](None, NONE, "where is my parcel?", "", 8, 1.0)
    assert info.endswith(
        "Only the base model answered: the shelf holds no adapter yet; train one in the Train "
        "tab (or import one in the Adapters tab) to compare it with the base model."
    ), info
    put_adapter(varied_dir, "support")
    *_, info, _, _, _ = table["run"](None, NONE, "where is my parcel?", "", 8, 1.0)
    assert info.endswith(
        "Only the base model answered: pick a Tuned adapter to see its answer beside it."
    ), info
