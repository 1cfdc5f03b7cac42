"""The Chat tab's feedback: a thumbs up or down on an answer, and a correction of the last one,
land in the review queue with the conversation (redacted) and the version that answered."""

from __future__ import annotations

import gradio as gr
from ui_handlers import handlers, last

from feedback.store import FeedbackStore
from ui.views.state import BASE_LABEL as BASE


def test_thumbs_and_a_correction_go_to_the_review_queue(home, tiny_llama_dir):
    table = handlers(tiny_llama_dir)
    history = last(
        table["respond"](
            [], "Reach me at ann@example.com: where is my parcel?", BASE, "", 8, 0, 0.9, 1.0, 0
        )
    )[0]
    assert [m["role"] for m in history] == ["user", "assistant"]
    said = table["on_rate"](
        history, BASE, "", gr.LikeData(None, {"index": 1, "value": "x", "liked": False})
    )
    assert said.startswith("Saved 👎") and "review queue" in said
    shown, kept = table["on_correct"](
        history, BASE, "You are Acme's support agent.", "Your parcel arrives on Friday."
    )
    assert shown.startswith("Saved 👎 with your correction") and kept == ""
    assert (
        table["on_rate"](
            history, BASE, "", gr.LikeData(None, {"index": 0, "value": "x", "liked": True})
        )
        == ""
    )
    _, kept = table["on_correct"](history, BASE, "", "   ")
    assert kept == "   "  # nothing to save: the box keeps what was typed
    rows = FeedbackStore().ratings()
    assert [(r["rating"], r["correction"], r["source"]) for r in rows] == [
        ("down", None, "chat"),
        ("down", "Your parcel arrives on Friday.", "chat"),
    ]
    assert rows[0]["messages"] == [
        {"role": "user", "content": "Reach me at [EMAIL]: where is my parcel?"}
    ]
    # the system prompt the answer was asked under is kept: training on the row asks as Chat did
    assert rows[1]["messages"] == [
        {"role": "system", "content": "You are Acme's support agent."},
        {"role": "user", "content": "Reach me at [EMAIL]: where is my parcel?"},
    ]
    assert rows[0]["answer"] == history[1]["content"] and rows[0]["adapter"] == "base"
    assert rows[0]["version"] == table["engine"].session.resolved.weight_hash


def test_the_status_line_names_the_pages_own_adapter_not_another_pages(home, tiny_llama_dir):
    """Page A picks adapter ``a``, page B then the base model (the app-wide choice): page A's
    status line (its timer) still names ``a``, the adapter that answers page A."""
    from serve_helpers import put_adapters

    put_adapters(home, tiny_llama_dir, names=("a",))
    table = handlers(tiny_llama_dir)
    table["on_switch"]("a")  # page A
    table["on_switch"](BASE)  # page B
    line = table["status_line"]("a")  # page A's timer, reading page A's dropdown
    assert "**Active adapter:** a" in line and "none (base model)" not in line
    assert "**Active adapter:** none (base model)" in table["status_line"](BASE)
    history = last(table["respond"]([], "Where is my parcel?", "a", "", 8, 0, 0.9, 1.0, 0))[0]
    said = table["on_rate"](
        history, "a", "", gr.LikeData(None, {"index": 1, "value": "x", "liked": True})
    )
    assert "for a (version" in said  # what the line names is what answered


def test_a_send_with_an_adapter_gone_from_the_shelf_says_so_and_refreshes_the_dropdown(
    home, tiny_llama_dir
):
    """Adapter ``tiny2`` is deleted (another page, the Adapters tab) while Chat has it picked:
    Send says so in a sentence, gives the question back and lists what the shelf holds."""
    import pytest
    from serve_helpers import put_adapters

    put_adapters(home, tiny_llama_dir, names=("tiny2", "other"))
    table = handlers(tiny_llama_dir)
    table["on_switch"]("tiny2")
    asked = "Where is my refund?"
    before = last(table["respond"]([], asked, "tiny2", "", 8, 0, 0.9, 1.0, 0))[0]
    assert [m["role"] for m in before] == ["user", "assistant"]
    assert table["on_delete"]("tiny2", True)[0] == "Deleted tiny2."
    with pytest.warns(UserWarning) as warned:
        sent = last(table["respond"]([], asked, "tiny2", "", 8, 0, 0.9, 1.0, 0))
    (message,) = [str(w.message) for w in warned]
    assert message == "tiny2 is no longer on the shelf; pick another adapter"  # no shelf path
    history, box, dropdown = sent
    assert history == [] and box == asked  # nothing left unanswered: the question is in the box
    assert dropdown["choices"] == [BASE, "other"] and dropdown["value"] == BASE
    assert "**Active adapter:** tiny2 — ⚠️ no longer on the shelf" in table["status_line"]("tiny2")
    # Retry keeps the conversation it was asked to answer again, and says the same
    with pytest.warns(UserWarning, match="no longer on the shelf"):
        history, box, _ = last(table["retry_last"](before, "tiny2", "", 8, 0, 0.9, 1.0, 0))
    assert history == before[:1] and box == ""
    # the refreshed choice answers
    history = last(table["respond"]([], asked, dropdown["value"], "", 8, 0, 0.9, 1.0, 0))[0]
    assert [m["role"] for m in history] == ["user", "assistant"]


def test_a_negative_seed_gets_the_generation_settings_sentence(home, tiny_llama_dir):
    """What Send sends goes through the Seed box's preprocess first: a minimum there refused -1
    with Gradio's own "Value -1 is less than minimum value 0." and a bare "Error"; a blank box
    says it is empty, not 'got None'."""
    import pytest

    table = handlers(tiny_llama_dir)
    box = table["blocks"]["chat-seed"]
    for typed, said in (
        (-1, "seed must be a whole number of 0 or more, got -1"),
        (None, "the Seed box is empty: type a whole number of 0 or more"),
    ):
        with pytest.warns(UserWarning) as warned:
            history, _, _ = last(
                table["respond"]([], "Hi", BASE, "", 8, 0, 0.9, 1.0, box.preprocess(typed))
            )
        assert history == [{"role": "user", "content": "Hi"}]
        assert [said in str(w.message) for w in warned] == [True], [str(w.message) for w in warned]


def test_picking_an_adapter_gone_from_the_shelf_says_so_without_a_path_and_relists(
    home, tiny_llama_dir
):
    """Deleted from another page while this page still lists it: picking it warned "no adapter
    named 'tiny2' on the shelf (<home>/adapters/tiny2 does not exist)", and kept listing it."""
    import pytest
    from serve_helpers import put_adapters

    put_adapters(home, tiny_llama_dir, names=("tiny2", "other"))
    table = handlers(tiny_llama_dir)
    assert table["on_delete"]("tiny2", True)[0] == "Deleted tiny2."
    with pytest.warns(UserWarning) as warned:
        dropdown, line = table["on_switch"]("tiny2")
    said = [str(w.message) for w in warned if w.category is UserWarning]
    assert said == ["tiny2 is no longer on the shelf; pick another adapter"], said
    assert dropdown["choices"] == [BASE, "other"] and dropdown["value"] == BASE
    assert "**Active adapter:** none (base model)" in line


def test_save_correction_before_any_answer_says_there_is_none_yet(home, tiny_llama_dir):
    """It warned "rate one of the assistant's answers", a thumb the user had not pressed."""
    import pytest

    with pytest.warns(UserWarning) as warned:
        shown, kept = handlers(tiny_llama_dir)["on_correct"]([], BASE, "", "It ships Friday.")
    said = [str(w.message) for w in warned if w.category is UserWarning]
    assert said == ["there is no answer to correct yet: send a message first"], said
    assert (shown, kept) == ("", "It ships Friday.")  # the box keeps what was typed
