"""The Adapters tab's aliases section, its handlers called as the buttons would call them."""

from __future__ import annotations

from alias_helpers import FAILED, PASSED, put_versions
from ui_handlers import handlers

from adapters.shelf.aliases import AliasBook, grounding_of
from core.store.home import open_store
from core.store.tables import audit_rows


def test_set_promote_and_refresh_through_the_tabs_handlers(home, tiny_llama_dir, random_lora_dir):
    put_versions(random_lora_dir, {"v3": PASSED, "v4": FAILED})
    table = handlers(tiny_llama_dir)
    said = table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    assert said == "support-bot: (none) → v3 100%."
    assert "Override for v4" in table["on_alias_promote"](
        "support-bot", "", "v4", True, "canary of the fix"
    )
    names, versions, about, rows, frame, *policy, grounding, check = table["refresh_aliases"](
        "support-bot", "requests"
    )
    assert names["choices"] == ["support-bot"] and set(versions["choices"]) == {"v3", "v4"}
    assert "v4                               100%" in about and "by page (ui)" in about
    assert [row[:3] for row in rows] == [["v3", 0, 0], ["v4", 100, 0]] and frame.empty
    assert policy == [0.0, 50, 10]  # no automatic rollback: the form shows margin 0
    assert grounding["value"] == "auto" and check == "off"
    state = table["engine"]
    state.alias_stats.record("v4", "ok", 0.2, 1.5)
    rows, frame = table["alias_figures"]("support-bot", "answer p95 (s)")
    assert rows[1][2] == 1 and frame["value"].tolist() == [1.5]
    assert (
        table["on_alias_rollback"]("support-bot", "", "", False, "")
        == "support-bot: v3 0% · v4 100% → v3 100%."
    )


def test_a_failed_gate_keeps_its_version_out_of_the_split_without_a_reasoned_override(
    home, tiny_llama_dir, random_lora_dir
):
    put_versions(random_lora_dir, {"v3": PASSED, "v4": FAILED})
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    for action, typed in (("on_alias_promote", ""), ("on_alias_set", "v3=90 v4=10")):
        refused = table[action]("support-bot", typed, "v4", False, "")
        assert refused.startswith("⚠️ release gate of v4: failed") and "--force" not in refused
        assert "or tick Override the release gate and give a reason" in refused
        assert table[action]("support-bot", typed, "v4", True, "  ").startswith("⚠️ an override")
    audit = audit_rows(open_store(home))
    assert (
        len(audit) == 1
        and "v4" not in table["refresh_aliases"]("support-bot", "requests")[2].split("\n")[1]
    )
    assert "Override for v4" in table["on_alias_set"](
        "support-bot", "v3=90 v4=10", "", True, "canary of the fix"
    )
    assert audit_rows(open_store(home))[-1]["forced"] == ["v4"]


def test_the_automatic_rollback_is_set_shown_and_turned_off_from_the_tab(
    home, tiny_llama_dir, random_lora_dir
):
    put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED})
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=90 v4=10", None, False, "")
    said = table["on_alias_auto_rollback"]("support-bot", 0.1, 40, 8)
    assert said == (
        "support-bot: v3 90% · v4 10% (split unchanged). Automatic rollback: when a canary's "
        "error rate (after 40 requests) or thumbs-down rate (after 8 ratings) exceeds the stable "
        "version's by more than 0.1."
    )
    *_, about, _rows, _frame, margin, requests, ratings, _, _ = table["refresh_aliases"](
        "support-bot", "requests"
    )
    assert (margin, requests, ratings) == (
        0.1,
        40,
        8,
    ) and "automatic rollback: when a canary's" in about
    assert table["on_alias_auto_rollback"]("support-bot", 1.5, 40, 8).startswith(
        "⚠️ the auto-rollback margin"
    )
    assert table["on_alias_auto_rollback"]("support-bot", 0.1, 2.5, 8).startswith(
        "⚠️ min requests must be"
    )
    assert table["on_alias_auto_rollback"]("support-bot", 0, 40, 8).endswith(
        "Automatic rollback: off."
    )
    assert table["refresh_aliases"]("support-bot", "requests")[-5:-2] == (0.0, 50, 10)


def test_the_grounding_is_chosen_from_the_shelf_and_shown(home, tiny_llama_dir, random_lora_dir):
    from knowledge.passages import Passage
    from knowledge.store import KnowledgeShelf

    put_versions(random_lora_dir, {"v3": PASSED})
    KnowledgeShelf().add("faq", [Passage("Refunds", "Paid within 30 days.", "kb.md")], ["kb.md"])
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    said = table["on_alias_grounding"]("support-bot", "faq@v1", False, "")
    assert said == "support-bot: v3 100% (split unchanged). Grounding: knowledge faq@v1."
    refused = table["on_alias_grounding"]("support-bot", "faq@v4", False, "")
    assert refused.startswith("⚠️ faq has no version 'v4'")
    assert table["on_alias_grounding"]("support-bot", "f/q", False, "").startswith(
        "⚠️ grounding must be"
    )
    *_, about, _rows, _frame, _m, _r, _t, grounding, _check = table["refresh_aliases"](
        "support-bot", "requests"
    )
    assert grounding["value"] == "faq@v1" and "grounding: knowledge faq@v1" in about
    assert grounding["choices"] == ["auto", "off", "faq", "faq@v1"]


def test_the_check_before_sending_is_turned_on_and_off_from_the_tab(
    home, tiny_llama_dir, random_lora_dir
):
    put_versions(random_lora_dir, {"v3": PASSED})
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    said = table["on_alias_check"]("support-bot", "on")
    assert "(split unchanged)" in said and "check" in said.lower()
    assert table["refresh_aliases"]("support-bot", "requests")[-1] == "on"
    assert AliasBook().row("support-bot")["check"] == "on"
    assert table["on_alias_check"]("support-bot", "maybe").startswith("⚠️ check must be")
    table["on_alias_check"]("support-bot", "off")
    assert table["refresh_aliases"]("support-bot", "requests")[-1] == "off"


def test_grounding_other_than_the_gate_checked_needs_the_override(
    home, tiny_llama_dir, random_lora_dir
):
    from alias_helpers import set_gate

    shelf = put_versions(random_lora_dir, {"v3": None})
    shelf.write_manifest_fields("v3", {"knowledge": {"name": "faq", "version": "v1"}})
    set_gate("v3", {**PASSED, "grounding": "faq v1"}, shelf)
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    refused = table["on_alias_grounding"]("support-bot", "off", False, "")
    assert refused.startswith("⚠️ v3: its release gate passed on answers grounded in faq v1")
    said = table["on_alias_grounding"]("support-bot", "off", True, "plain answers for a week")
    assert "Override for v3" in said and grounding_of(AliasBook().row("support-bot")) == "off"


def test_the_rollback_boxes_pass_a_bad_value_on_to_the_rules_sentence(
    home, tiny_llama_dir, random_lora_dir
):
    """What a click sends goes through each box's preprocess first: a minimum there refused 0
    with Gradio's own "Value 0 is less than minimum value 1." and a bare "Error" on the page."""
    put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED})
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=90 v4=10", None, False, "")
    boxes = [table["blocks"][f"alias-auto-{b}"] for b in ("margin", "requests", "ratings")]
    for typed, said in (
        ((1.5, 40, 8), "⚠️ the auto-rollback margin must be a number above 0 and at most 1"),
        ((-0.1, 40, 8), "⚠️ the auto-rollback margin must be a number above 0 and at most 1"),
        ((0.1, 0, 8), "⚠️ min requests must be a whole number of at least 1, got 0"),
        ((0.1, 40, -3), "⚠️ min ratings must be a whole number of at least 1, got -3"),
    ):
        sent = [box.preprocess(value) for box, value in zip(boxes, typed, strict=True)]
        assert table["on_alias_auto_rollback"]("support-bot", *sent).startswith(said), typed


def test_each_alias_button_with_the_alias_box_blank_says_to_type_one(home, tiny_llama_dir):
    """They said "invalid alias name '': use 1-64 letters, digits, ..." about a box left blank."""
    table = handlers(tiny_llama_dir)
    for said in (
        table["on_alias_set"]("", "v3=100", None, False, ""),
        table["on_alias_promote"](" ", "", "v3", False, ""),
        table["on_alias_rollback"]("", "", "", False, ""),
        table["on_alias_delete"]("", "", "", False, ""),
        table["on_alias_grounding"]("", "off", False, ""),
        table["on_alias_check"]("", "on"),
        table["on_alias_auto_rollback"]("", 0.1, 50, 10),
    ):
        assert said == "Type an alias name first, or pick one from Alias.", said
