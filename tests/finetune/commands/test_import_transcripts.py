"""python -m finetune import-transcripts: files written, stats printed; bad input is exit 2 and
one sentence, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from finetune.__main__ import main

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "assets" / "demo_helpdesk_export.csv"


def test_import_writes_train_eval_and_stats(tmp_path, capsys):
    assert (
        main(
            [
                "import-transcripts",
                str(DEMO),
                "--out",
                str(tmp_path),
                "--eval-fraction",
                "0.2",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    assert "9 conversations" in report and "1 no agent reply" in report and "redacted" in report
    train = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert (len(train), len(held)) == (7, 2)
    assert {c["conversation_id"] for c in train}.isdisjoint(c["conversation_id"] for c in held)
    assert all(set(c) == {"conversation_id", "messages", "intent"} for c in train + held)
    # The demo's tags column: the first tag that is not a status or priority word.
    assert "intents       from column tags: 9 of 9 conversations (8 intents:" in report
    assert {c["conversation_id"]: c["intent"] for c in train + held}["T-1001"] == "track_order"
    stats = json.loads((tmp_path / "import_stats.json").read_text())
    assert stats["conversations_train"] == 7 and stats["seed"] == 3
    assert stats["intent"]["column"] == "tags" and stats["intent"]["labels"]["payment_issue"] == 2


def test_intents_can_be_named_mapped_or_switched_off(tmp_path, capsys):
    export = tmp_path / "own.csv"
    export.write_text(
        "case,who,msg,Labels,Reason\n1,Member,hello,wismo,Where is it\n1,Rep,hi there,,\n"
    )
    base = ["import-transcripts", str(export), "--eval-fraction", "0"]
    base += ["--column-map", "ticket=case,role=who,text=msg"]
    base += ["--role-map", "Member=user,Rep=assistant"]

    def rows(out: str) -> list[dict]:
        return [json.loads(x) for x in (tmp_path / out / "train.jsonl").read_text().splitlines()]

    assert main([*base, "--out", str(tmp_path / "a")]) == 0  # Reason comes before Labels
    assert rows("a")[0]["intent"] == "Where is it"
    assert "intents       from column Reason: 1 of 1 conversations" in capsys.readouterr().out
    argv = [*base, "--out", str(tmp_path / "b"), "--intent-column", "Labels"]
    assert main([*argv, "--intent-tags", "WISMO=track_order"]) == 0
    assert rows("b")[0]["intent"] == "track_order"
    assert main([*base, "--out", str(tmp_path / "c"), "--no-intent"]) == 0
    assert "intent" not in rows("c")[0]
    assert "intents       not read (--no-intent)" in capsys.readouterr().out


def test_an_export_without_an_intent_column_says_what_to_do(tmp_path, capsys):
    export = tmp_path / "plain.csv"
    export.write_text("ticket_id,role,text\n1,customer,hi\n1,agent,hello\n")
    assert main(["import-transcripts", str(export), "--out", str(tmp_path / "o")]) == 0
    report = capsys.readouterr().out
    assert (
        "intents       none: no intent, category, topic or tags column among ticket_id, role, "
        "text; name the column holding each ticket's label with --intent-column NAME, or the "
        "release gate's answer-quality floors cannot be checked" in report
    )


def test_json_output_and_named_columns(tmp_path, capsys):
    export = tmp_path / "own.tsv"
    export.write_text("case\twho\tmsg\n1\tMember\thello\n1\tRep\thi there\n")
    argv = [
        "import-transcripts",
        str(export),
        "--out",
        str(tmp_path / "o"),
        "--json",
        "--eval-fraction",
        "0",
        "--column-map",
        "ticket=case,role=who,text=msg",
        "--role-map",
        "Member=user,Rep=assistant",
    ]
    assert main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["conversations"] == 1 and stats["eval_file"] is None
    assert not (tmp_path / "o" / "eval.jsonl").exists()


@pytest.mark.parametrize(
    ("extra", "content", "match"),
    [
        ([], "id,who,words\n1,customer,hi\n", "no column for the ticket / role / text"),
        ([], "ticket_id,role,text\n1,customer,hi\n", "none of the 1 tickets gives a conversation"),
        (["--column-map", "text"], None, "column map: 'text' is not NAME=VALUE"),
        (["--role-map", "x=boss"], None, "roles must be user, assistant or drop"),
        (["--eval-fraction", "1.5"], None, "eval fraction must be at least 0 and below 1"),
        (
            ["--intent-column", "Topic"],
            None,
            "demo_helpdesk_export.csv: column 'Topic' (for intent) is not in the export "
            "(columns: ticket_id, created_at, author_role, author_name, body, tags)",
        ),
        (["--intent-tags", "urgent"], None, "intent tags: 'urgent' is not NAME=VALUE"),
    ],
)
def test_bad_input_is_exit_2_and_a_sentence(tmp_path, capsys, extra, content, match):
    export = DEMO
    if content is not None:
        export = tmp_path / "x.csv"
        export.write_text(content)
    assert main(["import-transcripts", str(export), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and "Traceback" not in err


def test_an_out_folder_that_is_a_file_is_refused_and_kept(tmp_path, capsys):
    taken = tmp_path / "o"
    taken.write_text("someone's notes")
    assert main(["import-transcripts", str(DEMO), "--out", str(taken)]) == 2
    assert "is a file; name a folder for train.jsonl" in capsys.readouterr().err
    assert taken.read_text() == "someone's notes"


def test_an_out_folder_holding_data_no_import_wrote_is_refused_and_kept(tmp_path, capsys):
    """A folder's own train.jsonl was overwritten, and its eval.jsonl deleted when the import
    held none out; an earlier import's folder is still written over, as before."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.jsonl").write_text('{"instruction": "hi", "response": "hand-made"}\n')
    (mine / "eval.jsonl").write_text('{"instruction": "yo", "response": "kept"}\n')
    before = {f.name: f.read_bytes() for f in mine.iterdir()}
    for fraction in ("0.2", "0"):
        argv = ["import-transcripts", str(DEMO), "--out", str(mine), "--eval-fraction", fraction]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "holds train.jsonl, eval.jsonl that no import wrote" in err and err.count("\n") == 1
    assert {f.name: f.read_bytes() for f in mine.iterdir()} == before
    again = tmp_path / "import"
    assert main(["import-transcripts", str(DEMO), "--out", str(again)]) == 0
    assert main(["import-transcripts", str(DEMO), "--out", str(again), "--seed", "7"]) == 0


def test_a_missing_file_from_a_real_process_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "finetune",
            "import-transcripts",
            str(tmp_path / "nope.csv"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr
