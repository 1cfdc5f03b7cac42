"""finetune.data.transcripts (+ helpdesk): a helpdesk export grouped, ordered, redacted, split
by conversation; bad input counted with a sentence; the import trains through the real pipeline."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from finetune.data.checks import DataError
from finetune.data.helpdesk import parse_time, read_export
from finetune.data.transcripts import import_to_folder, import_transcripts, split_conversations

ROOT = Path(__file__).resolve().parents[3]
HEADER = ["ticket_id", "created_at", "author_role", "author_name", "body"]
# (ticket, time, role, name, text): a crafted export with every kind of personal data.
CRAFTED = [
    (
        "A1",
        "2024-03-04T09:12:00Z",
        "customer",
        "Dana Whitfield",
        "Hi, order #48213 is late. Mail dana@example.com",
    ),
    (
        "A1",
        "2024-03-04T09:20:00Z",
        "agent",
        "Sarah Lin",
        "Hi Dana, I'm Sarah. Order #48213 ships 2024-03-05.",
    ),
    (
        "A2",
        "1709650000",
        "end-user",
        "Marco Bell",
        "Charged twice, card 4111 1111 1111 1111, $59.90 each.",
    ),
    ("A2", "1709650100", "note", "Priya Raman", "Internal: duplicate capture."),
    (
        "A2",
        "1709650200000",
        "support",
        "Priya Raman",
        "Refunded, Marco. Call +44 20 7946 0958 if needed.",
    ),
]


def write_csv(path: Path, rows, header=HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def by_id(result) -> dict:
    return {c["conversation_id"]: c["messages"] for c in result.conversations}


def test_crafted_export_is_redacted_and_grouped(tmp_path):
    result = import_transcripts(write_csv(tmp_path / "x.csv", CRAFTED))
    convs = by_id(result)
    assert convs["A1"] == [
        {"role": "user", "content": "Hi, order [ORDER] is late. Mail [EMAIL]"},
        {
            "role": "assistant",
            "content": "Hi [CUSTOMER], I'm [AGENT]. Order [ORDER] ships 2024-03-05.",
        },
    ]
    # Epoch seconds and milliseconds order the ticket; the internal note is dropped.
    assert convs["A2"] == [
        {"role": "user", "content": "Charged twice, card [CARD], $59.90 each."},
        {"role": "assistant", "content": "Refunded, [CUSTOMER]. Call [PHONE] if needed."},
    ]
    s = result.stats
    assert s["redactions"] == {
        "agent": 1,
        "card": 1,
        "customer": 2,
        "email": 1,
        "order": 2,
        "phone": 1,
    }
    assert (s["conversations"], s["messages"], s["dropped"]["internal_notes"]) == (2, 4, 1)
    text = json.dumps(result.conversations)
    for secret in ("Dana", "Sarah", "Marco", "Priya", "48213", "4111", "7946", "dana@"):
        assert secret not in text


def test_messages_are_ordered_by_time_and_same_side_messages_merged(tmp_path):
    rows = [
        ("B", "2024-01-01T10:05:00", "agent", "Tom", "Second answer"),
        ("B", "2024-01-01T10:00:00", "customer", "Ann", "First question"),
        ("B", "2024-01-01T10:01:00+00:00", "agent", "Tom", "First answer"),
        ("B", "2024-01-01T10:03:00Z", "customer", "Ann", "Second question"),
        ("B", "2024-01-01T10:04:00Z", "customer", "Ann", "and more"),
        ("B", "2024-01-01T10:09:00Z", "customer", "Ann", "unanswered"),
    ]
    result = import_transcripts(write_csv(tmp_path / "o.csv", rows))
    assert [(m["role"], m["content"]) for m in by_id(result)["B"]] == [
        ("user", "First question"),
        ("assistant", "First answer"),
        ("user", "Second question\n\nand more"),
        ("assistant", "Second answer"),
    ]
    assert result.stats["dropped"]["merged_into_previous"] == 1
    assert result.stats["dropped"]["unanswered_customer_messages"] == 1


def test_equal_or_missing_times_keep_file_order():
    assert (
        parse_time("2024-03-04T09:12:00Z") == parse_time("1709543520") == parse_time(1709543520000)
    )
    assert parse_time("yesterday") is None and parse_time("") is None


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 42])
def test_no_conversation_is_in_both_splits(tmp_path, seed):
    rows = []
    for t in range(40):
        for k in range(3):  # several rows per ticket: a row-level split would scatter them
            rows.append(
                (
                    f"T{t}",
                    f"2024-01-01T10:0{k}:00Z",
                    ("customer", "agent")[k % 2],
                    "",
                    f"msg {t} {k}",
                )
            )
    stats = import_to_folder(
        write_csv(tmp_path / "s.csv", rows), tmp_path / f"out{seed}", 0.25, seed
    )
    train = [
        json.loads(x)["conversation_id"] for x in Path(stats["train_file"]).read_text().splitlines()
    ]
    held = [
        json.loads(x)["conversation_id"] for x in Path(stats["eval_file"]).read_text().splitlines()
    ]
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(f"T{t}" for t in range(40))
    assert (len(train), len(held)) == (30, 10)
    again = import_to_folder(tmp_path / "s.csv", tmp_path / f"again{seed}", 0.25, seed)
    assert Path(again["eval_file"]).read_text() == Path(stats["eval_file"]).read_text()


def test_split_holds_out_at_least_one_and_never_all():
    convs = [{"conversation_id": str(i), "messages": []} for i in range(3)]
    assert [len(p) for p in split_conversations(convs, 0.01, 0)] == [2, 1]
    assert [len(p) for p in split_conversations(convs[:1], 0.5, 0)] == [1, 0]
    assert [len(p) for p in split_conversations(convs, 0.0, 0)] == [3, 0]
    with pytest.raises(ValueError, match="eval fraction"):
        split_conversations(convs, 1.0, 0)


def test_bad_tickets_are_counted_with_a_sentence_never_a_crash(tmp_path):
    big = "x" * (10 << 20)  # a 10 MB message
    rows = [
        ("ok", "1", "customer", "", "Hello?"),
        ("ok", "2", "agent", "", "Hi!"),
        ("silent", "1", "customer", "", "Anyone there?"),
        ("silent", "2", "customer", "", "Hello??"),
        ("agents", "1", "agent", "", "We are closed."),
        ("agents", "2", "agent", "", "Still closed."),
        ("reversed", "5", "customer", "", "Thanks"),
        ("reversed", "1", "agent", "", "Welcome!"),
        ("huge", "1", "customer", "", big),
        ("huge", "2", "agent", "", "Too long."),
        ("who", "1", "manager", "", "Hm"),
        ("who", "2", "agent", "", "Yes"),
        ("when", "2024-01-01", "customer", "", "Hi"),
        ("when", "soon", "agent", "", "Hello"),
        ("", "1", "customer", "", "no ticket id"),
    ]
    result = import_transcripts(write_csv(tmp_path / "bad.csv", rows))
    s = result.stats
    assert list(by_id(result)) == ["ok"]
    assert s["skipped"] == {
        "no_agent_reply": 2,
        "no_customer_message": 1,
        "too_large": 1,
        "unknown_role": 1,
        "bad_timestamp": 1,
    }
    assert s["rows_skipped"] == {"no_ticket_id": 1}
    notes = " | ".join(s["examples"])
    for words in (
        "'silent': has no agent reply",
        "'agents': has no customer message",
        "'reversed': has no agent reply",
        "10.5 M characters",
        "'manager'",
        "'soon'",
        "row 15: no ticket id",
    ):
        assert words in notes
    assert s["dropped"]["agent_messages_before_customer"] == 1  # "reversed": the agent wrote first


def test_an_import_with_no_usable_ticket_is_one_sentence(tmp_path):
    rows = [("a", "1", "customer", "", "Hi?"), ("b", "1", "customer", "", "Hello?")]
    with pytest.raises(
        DataError, match="none of the 2 tickets gives a conversation .*2 no agent reply"
    ):
        import_transcripts(write_csv(tmp_path / "none.csv", rows))


@pytest.mark.parametrize(
    ("content", "name", "match"),
    [
        (b"", "empty.csv", "the file is empty"),
        ("ticket_id,role,text\n1,customer,hi\n".encode("utf-16"), "u16.csv", "UTF-16"),
        (
            b"id,who,words\n1,customer,hi\n",
            "cols.csv",
            r"no column for the ticket / role / text \(columns: id, who, words\)",
        ),
        (b"{not json\n[1, 2\n", "broken.jsonl", "has no message rows .*line 1: not a JSON object"),
        (b'{"a": [1,', "broken.json", "not valid JSON"),
        (b"\x00\x01\x02binary", "bin.csv", "binary content"),
    ],
)
def test_bad_files_are_one_sentence(tmp_path, content, name, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        import_transcripts(path)


def test_jsonl_with_nested_authors_aliases_and_a_broken_line(tmp_path):
    lines = [
        {
            "conversation_id": 7,
            "author": {"type": "user", "name": "Kim"},
            "body": "Hi, I'm Kim",
            "created_at": 1,
        },
        "{broken",
        {
            "conversation_id": 7,
            "author": {"type": "admin", "name": "Lou"},
            "body": "Lou here, hi Kim",
            "created_at": 2,
        },
    ]
    path = tmp_path / "intercom.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    result = import_transcripts(path)
    assert result.stats["columns"] == {
        "ticket": "conversation_id",
        "role": "author.type",
        "name": "author.name",
        "text": "body",
        "time": "created_at",
    }
    assert by_id(result)["7"][1]["content"] == "[AGENT] here, hi [CUSTOMER]"
    assert result.stats["rows_skipped"] == {"unreadable_row": 1}
    assert "line 2: not a JSON object" in result.stats["examples"][0]


def test_columns_and_roles_can_be_named(tmp_path):
    rows = [("1", "Member", "hello there"), ("1", "Rep", "hi, how can I help?")]
    path = write_csv(tmp_path / "own.csv", rows, header=["case_no", "who", "msg"])
    with pytest.raises(DataError, match="no column for the ticket / role / text"):
        read_export(path)
    with pytest.raises(DataError, match="column 'missing' \\(for text\\) is not in the export"):
        read_export(path, columns={"ticket": "case_no", "role": "who", "text": "missing"})
    result = import_transcripts(
        path,
        columns={"ticket": "case_no", "role": "who", "text": "msg"},
        roles={"member": "user", "Rep": "assistant"},
    )
    assert [m["role"] for m in by_id(result)["1"]] == ["user", "assistant"]


def test_demo_export_imports(tmp_path):
    stats = import_to_folder(ROOT / "assets" / "demo_helpdesk_export.csv", tmp_path, 0.2, 1)
    assert stats["tickets"] == 10 and stats["conversations"] == 9
    assert stats["skipped"] == {"no_agent_reply": 1}
    assert set(stats["redactions"]) == {"agent", "card", "customer", "email", "order", "phone"}
    assert json.loads((tmp_path / "import_stats.json").read_text())["conversations"] == 9


def test_imported_conversations_train_and_label_exactly_the_agent_turns(
    tmp_path, home, tiny_llama_dir
):
    from run_helpers import tiny_run_config
    from transformers import AutoTokenizer

    from finetune import data
    from finetune.data.format import IGNORE_INDEX
    from finetune.train import train

    rows = []
    for t in range(6):
        rows += [
            (f"C{t}", "1", "customer", "Ann Lee", f"Where is my order #{5000 + t}?"),
            (f"C{t}", "2", "agent", "Sam Roy", "Hi Ann, I'm Sam. It ships today."),
            (f"C{t}", "3", "customer", "Ann Lee", "Thanks, Sam!"),
            (f"C{t}", "4", "agent", "Sam Roy", "You're welcome."),
        ]
    stats = import_to_folder(write_csv(tmp_path / "e2e.csv", rows), tmp_path / "out", 0.2, 0)
    cfg = tiny_run_config(tiny_llama_dir, max_steps=2)
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = stats["train_file"], None, 200
    prepared = data.prepare(cfg.data, AutoTokenizer.from_pretrained(tiny_llama_dir))
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    labels = prepared.train[0]["labels"]
    spans, current = [], []
    for t in labels + [IGNORE_INDEX]:
        if t != IGNORE_INDEX:
            current.append(t)
        elif current:
            spans, current = spans + [tok.decode(current)], []
    assert spans == [
        "Hi [CUSTOMER], I'm [AGENT]. It ships today.<|im_end|>",
        "You're welcome.<|im_end|>",
    ]
    assert train(cfg).status == "done"
