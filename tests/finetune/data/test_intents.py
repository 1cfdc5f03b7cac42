"""finetune.data.intents (+ the import): a helpdesk ticket's intent from its category, topic or
tags column, carried into every written conversation, through training and onto the knowledge
shelf beside the adapter."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from finetune.data.checks import DataError
from finetune.data.helpdesk import parse_intent_tags
from finetune.data.intents import cell_intent, ticket_intent
from finetune.data.transcripts import import_to_folder, import_transcripts

HEADER = ["ticket_id", "author_role", "body"]


def write_csv(path: Path, header, rows) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def intents_of(result) -> dict:
    return {c["conversation_id"]: c.get("intent", "<none>") for c in result.conversations}


def test_a_category_column_gives_each_conversation_the_first_value_of_its_rows(tmp_path):
    rows = [
        ("1", "customer", "Where is my parcel?", ""),  # the category is set on a later row
        ("1", "agent", "It ships today.", "Shipping"),
        ("1", "customer", "Thanks", "Billing"),
        ("2", "customer", "I was charged twice", "Billing"),
        ("2", "note", "duplicate capture", "Billing"),
        ("2", "agent", "Refunded.", "Billing"),
        ("3", "customer", "Hello?", ""),
        ("3", "agent", "Hi, how can I help?", ""),
    ]
    path = write_csv(tmp_path / "x.csv", [*HEADER, "Category"], rows)
    result = import_transcripts(path)
    assert intents_of(result) == {"1": "Shipping", "2": "Billing", "3": None}
    assert result.stats["columns"]["intent"] == "Category"
    assert result.stats["intent"] == {
        "column": "Category",
        "off": False,
        "conversations": 2,
        "labels": {"Billing": 1, "Shipping": 1},
    }


def test_a_tags_column_gives_the_first_tag_that_is_not_a_status_or_priority_word(tmp_path):
    rows = [
        ("1", "customer", "refund please", "urgent, get_refund, vip"),
        ("1", "agent", "Done.", "urgent, get_refund, vip"),
        ("2", "customer", "where is it", "priority_high; track_order"),
        ("2", "agent", "On its way.", ""),
        ("3", "customer", "hi", "open | high"),  # only status words: no intent
        ("3", "agent", "hello", ""),
    ]
    path = write_csv(tmp_path / "t.csv", [*HEADER, "Tags"], rows)
    result = import_transcripts(path)
    assert intents_of(result) == {"1": "get_refund", "2": "track_order", "3": None}
    assert result.stats["intent"]["conversations"] == 2
    # --intent-tags: a mapped tag wins over the rule, anywhere in the ticket's tags.
    mapped = import_transcripts(path, intent_tags=parse_intent_tags("VIP=vip_request"))
    assert intents_of(mapped)["1"] == "vip_request" and intents_of(mapped)["2"] == "track_order"


def test_tag_lists_as_zendesk_and_json_write_them():
    assert cell_intent("urgent refund_request", tags=True) == "refund_request"  # Zendesk: spaces
    assert cell_intent("Billing question", tags=False) == "Billing question"  # a category: whole
    assert cell_intent(["urgent", {"name": "Shipping"}], tags=True) == "Shipping"  # Intercom
    assert cell_intent("  ", tags=True) is None and cell_intent(None, tags=False) is None
    assert cell_intent("x" * 101, tags=False) is None  # free text, not a label
    assert ticket_intent(["", "closed", "pending, returns"], tags=True) == "returns"


def test_every_written_row_carries_the_intent_and_no_intent_turns_it_off(tmp_path):
    rows = [(str(t), r, f"{r} {t}", f"topic{t % 2}") for t in range(4) for r in ("user", "agent")]
    path = write_csv(tmp_path / "e.csv", [*HEADER, "topic"], rows)
    stats = import_to_folder(path, tmp_path / "out", 0.5, 0)
    written = [
        json.loads(line)
        for name in ("train.jsonl", "eval.jsonl")
        for line in (tmp_path / "out" / name).read_text().splitlines()
    ]
    assert sorted(r["intent"] for r in written) == ["topic0", "topic0", "topic1", "topic1"]
    assert (
        json.loads((tmp_path / "out" / "import_stats.json").read_text())["intent"]
        == (stats["intent"])
    )
    off = import_transcripts(path, columns={"intent": None})
    assert all("intent" not in c for c in off.conversations)
    assert off.stats["intent"] == {"column": None, "off": True, "conversations": 0, "labels": {}}


def test_no_intent_column_says_so_and_a_named_missing_one_is_refused(tmp_path):
    path = write_csv(tmp_path / "plain.csv", HEADER, [("1", "user", "hi"), ("1", "agent", "yo")])
    result = import_transcripts(path)
    assert all("intent" not in c for c in result.conversations)
    assert result.stats["intent"] == {
        "column": None,
        "off": False,
        "conversations": 0,
        "labels": {},
    }
    with pytest.raises(DataError) as err:
        import_transcripts(path, columns={"intent": "Tags"})
    assert str(err.value) == (
        "plain.csv: column 'Tags' (for intent) is not in the export "
        "(columns: ticket_id, author_role, body)"
    )


def test_imported_intents_train_and_label_the_knowledge_beside_the_adapter(
    tmp_path, home, tiny_llama_dir
):
    from run_helpers import tiny_run_config

    from finetune.train import train
    from knowledge import index
    from knowledge.store import KnowledgeShelf

    rows = []
    for t in range(8):
        # C0 and C1 have no intent (only a priority tag, none at all): rows with intent null.
        tags = (
            "urgent"
            if t == 0
            else ""
            if t == 1
            else "urgent, track_order"
            if t % 2
            else "get_refund"
        )
        rows += [
            (f"C{t}", "customer", f"Question {t}: where is my money or parcel?", tags),
            (f"C{t}", "agent", f"Answer {t}: it is on its way.", tags),
        ]
    export = write_csv(tmp_path / "helpdesk.csv", [*HEADER, "tags"], rows)
    stats = import_to_folder(export, tmp_path / "out", 0.25, 0)
    cfg = tiny_run_config(tiny_llama_dir, max_steps=1)
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = stats["train_file"], None, 96
    cfg.data.val_fraction = 0.0
    result = train(cfg)
    assert result.status == "done"
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["data"]["mapping"]["intent"] == "intent"  # the written rows' intent field
    entry = manifest["knowledge"]
    version = KnowledgeShelf().get(entry["name"], entry["version"])
    assert index.has_intents(version.index_path)
    written = {
        r["conversation_id"]: r["intent"]
        for name in ("train.jsonl", "eval.jsonl")
        for r in map(json.loads, (tmp_path / "out" / name).read_text().splitlines())
    }
    assert written["C0"] is None and written["C1"] is None and written["C2"] == "get_refund"
    labels = {p.intent for _, p in version.passages_page()}
    assert labels - {""} == {"track_order", "get_refund"}
