"""ui/views/wording.py: the engine's sentences that name a CLI flag reach the tabs naming the
tab's own control (or what to change in the data), each raised through what the tab calls;
the CLI keeps the flag."""

from __future__ import annotations

import json

import pytest

from core.hardware import detect
from ui.views import forms, knowledge, transcripts
from ui.views import train_actions as train_handlers
from ui.views.train_actions import DATA_SOURCES
from ui.views.train_check import estimate_text
from ui.views.wording import for_ui

PATH = DATA_SOURCES[2]


def test_the_train_tab_says_to_rename_columns_it_cannot_map(tiny_llama_dir, tmp_path):
    data = tmp_path / "tickets.csv"
    data.write_text("foo,bar\nwhere is my parcel,on its way\n")
    info, frame = train_handlers.data_preview(PATH, None, str(data))
    hint = "; rename the file's columns to one of these (the Train and Evaluate tabs map no others)"
    assert frame is None and info.endswith("input/output or a messages column" + hint)
    cfg = forms.ui_defaults()
    cfg.model.name = str(tiny_llama_dir)
    text = train_handlers.checked_text(
        detect(), estimate_text, PATH, None, str(data), forms.form_values(cfg)
    )
    assert text.endswith("a messages column" + hint) and "--" not in text
    message, run_id = train_handlers.start_run(
        detect(), PATH, None, str(data), forms.form_values(cfg)
    )
    assert run_id is None and hint in message and "--prompt-column" not in message


def test_the_helpdesk_import_names_its_boxes(home, tmp_path):
    export = tmp_path / "export.csv"
    export.write_text("case,body\n1,Where is my parcel?\n")
    text, *_ = transcripts.import_export(None, str(export))
    assert "or name them in the Column map box (ticket=...,role=...,text=...)" in text
    assert "--column-map" not in text
    export.write_text(
        "ticket_id,role,text\n1,customer,Where is my parcel?\n1,supervisor,On its way.\n"
        "2,customer,A refund?\n2,agent,Within 30 days.\n"
    )
    text, *_ = transcripts.import_export(None, str(export))
    assert "neither a customer nor an agent role (map it in the Role map box: VALUE=user)" in text
    lines = tmp_path / "export.json"  # JSON lines in a .json file
    lines.write_text(json.dumps({"ticket_id": 1, "role": "customer", "text": "Hi"}) + "\n" * 2)
    lines.write_text(lines.read_text() + json.dumps({"ticket_id": 1, "role": "agent"}) + "\n")
    text, *_ = transcripts.import_export(None, str(lines))
    assert "or save JSON lines as a .jsonl file" in text and "--format" not in text


def test_the_knowledge_tab_says_to_tick_the_box(home, tmp_path):
    faq = tmp_path / "faq.md"
    faq.write_text("# Refunds\nWithin 30 days.\n")
    knowledge.import_upload([str(faq)], "kb")
    with pytest.raises(ValueError) as err:
        knowledge.delete_version("kb", "v1", False)
    assert str(err.value) == (
        "kb v1: Deleting is for good: confirm it (tick Delete the chosen version for good)."
    )


def test_a_run_with_no_row_short_enough_names_the_advanced_box(tiny_llama_dir, tmp_path):
    """The training child's sentence (the run's failure, as the tab shows it)."""
    from transformers import AutoTokenizer

    from finetune.config import DataArgs
    from finetune.data.load import DataError
    from finetune.data.pipeline import prepare

    data = tmp_path / "long.jsonl"
    row = {"prompt": " ".join(["where is my parcel"] * 20), "response": "on its way"}
    data.write_text("\n".join(json.dumps(row) for _ in range(4)) + "\n")
    with pytest.raises(DataError) as err:
        prepare(
            DataArgs(path=str(data), max_length=16), AutoTokenizer.from_pretrained(tiny_llama_dir)
        )
    assert "raise --max-length or use shorter prompts" in str(err.value)  # the CLI's
    assert for_ui(str(err.value)).endswith(
        "raise Max length (tokens) under Advanced, or use shorter prompts"
    )


def test_the_evaluate_tab_names_its_own_controls(home, tiny_llama_dir, random_lora_dir, tmp_path):
    """Evaluate's refusals named `--prompt-column` and `--no-golden`, flags the tab lacks."""
    from alias_helpers import put_versions
    from ui_handlers import handlers

    from eval.scoring_rows import load_golden

    put_versions(random_lora_dir, {"tuned": None})
    data = tmp_path / "odd.csv"
    data.write_text("foo,bar\nwhere is my parcel,on its way\n" * 4)
    said = handlers(tiny_llama_dir)["on_run"](["tuned"], str(data), 2, 8, 4, False, "", 0)[0]
    assert said.endswith(
        "a messages column; rename the file's columns to one of these (the Train and Evaluate "
        "tabs map no others)"
    ), said
    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n")
    with pytest.raises(ValueError) as err:
        load_golden(golden)
    assert "(--no-golden)" in str(err.value)  # the CLI's
    assert for_ui(str(err.value)).endswith("or untick Check the golden prompts")


def test_the_aliases_and_the_shelf_name_the_adapters_tabs_controls(
    home, tiny_llama_dir, random_lora_dir
):
    """The aliases' refusals said `python -m eval --knowledge faq@v1`, `python -m adapters list`
    and `python -m adapters alias set ...`; the shelf's, `python -m adapters alias set ALIAS
    OTHER=100`."""
    from alias_helpers import PASSED, put_versions, set_gate
    from ui_handlers import handlers

    shelf = put_versions(random_lora_dir, {"v3": None, "v4": PASSED})
    shelf.write_manifest_fields("v3", {"knowledge": {"name": "faq", "version": "v1"}})
    set_gate("v3", {**PASSED, "grounding": "faq v1"}, shelf)
    table = handlers(tiny_llama_dir)
    table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    said = table["on_alias_grounding"]("support-bot", "off", False, "")
    assert "or evaluate it as served (the Evaluate tab, Grounding: off)." in said, said
    from knowledge.passages import Passage
    from knowledge.store import KnowledgeShelf

    for text in ("Refunds within 30 days.", "Refunds within 60 days."):
        KnowledgeShelf().add("faq", [Passage("Refunds", text, "faq.md")], ["faq.md"])
    assert table["on_alias_grounding"]("support-bot", "faq@v1", False, "").startswith("support")
    set_gate("v4", {**PASSED, "grounding": "faq v2"}, shelf)
    said = table["on_alias_promote"]("support-bot", "", "v4", False, "")
    assert "or evaluate it as served (the Evaluate tab, Grounding: on, Ground in: faq@v1)" in said
    from ui.views.evaluation import knowledge_choices

    assert "faq@v1" in knowledge_choices(None)[0]  # what the sentence says to pick is offered
    said = table["on_alias_set"]("support-bot", "nosuch=100", None, False, "")
    assert said == "⚠️ 'nosuch' is not an adapter on the shelf (the shelf above lists them)"
    said = table["on_alias_promote"]("nobot", "", "v3", False, "")
    assert said == (
        "⚠️ no alias named 'nobot'; create it: type a split (`v3=100`) and press **Set split**"
    )
    for said in (table["on_delete"]("v3", True)[0], table["on_rename"]("v3", "v9")[0]):
        assert (
            "move it to another version first (under Aliases below: pick the alias, type a "
            "split such as `OTHER=100` and press **Set split**)" in said
        ), said
        assert "python -m" not in said


def test_an_adapter_not_on_the_shelf_is_named_without_the_shelfs_path(tiny_llama_dir, home):
    """Start from adapter naming one the shelf lacks said "no adapter named 'nosuch' on the shelf
    (<home>/adapters/nosuch does not exist)": a path on the server, not what to do."""
    pairs = home / "pairs.jsonl"
    pairs.parent.mkdir(parents=True, exist_ok=True)
    pairs.write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
    cfg = forms.ui_defaults()
    cfg.model.name, cfg.train.method, cfg.train.from_adapter = str(tiny_llama_dir), "dpo", "nosuch"
    cfg.data.with_passages = 0
    text = train_handlers.checked_text(
        detect(), estimate_text, PATH, None, str(pairs), forms.form_values(cfg)
    )
    assert "- no adapter named 'nosuch' on the shelf: pick one it holds" in text, text
    assert str(home) not in text
