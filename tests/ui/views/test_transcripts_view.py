"""The Train tab's helpdesk import: preview counts and redacted rows; the dataset becomes the
import's train.jsonl; a refused export leaves nothing in the home folder."""

from __future__ import annotations

import json
from pathlib import Path

from ui.views.transcripts import PREVIEW_CONVERSATIONS, import_export

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "assets" / "demo_helpdesk_export.csv"


def test_import_previews_counts_and_redacted_conversations(home):
    text, rows, train_file, eval_file = import_export(str(DEMO), "", eval_fraction=0.2)
    assert "Imported 9 conversations" in text and "1 no agent reply" in text
    assert eval_file == str(Path(train_file).with_name("eval.jsonl")) and Path(eval_file).is_file()
    assert f"`{eval_file}`, now the Evaluate tab's dataset" in text
    assert "Redacted:" in text and "card" in text and "phone" in text
    assert train_file and Path(train_file).is_relative_to(home / "datasets" / "transcripts")
    assert len({r[0] for r in rows}) == PREVIEW_CONVERSATIONS
    shown = json.dumps(rows)
    assert "[AGENT]" in shown and "Sarah" not in shown and "@example" not in shown
    # The raw export is not kept in the home folder: only the redacted files are.
    kept = sorted(p.name for p in home.rglob("*") if p.is_file())
    assert kept == ["eval.jsonl", "import_stats.json", "train.jsonl"]


def test_typed_path_and_maps(home, tmp_path):
    export = tmp_path / "own.csv"
    export.write_text("case,who,msg\n1,Member,hello\n1,Rep,hi there\n")
    text, rows, train_file, eval_file = import_export(
        None, str(export), "ticket=case,role=who,text=msg", "Member=user,Rep=assistant", 0
    )
    assert eval_file is None and "Evaluate tab" not in text  # nothing held out
    assert train_file and rows == [["1", "user", "hello"], ["1", "assistant", "hi there"]]


def test_bad_exports_are_a_sentence_and_leave_nothing(home, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,who,words\n1,customer,hi\n")
    for args in [
        (str(bad), ""),
        (None, ""),
        (None, str(tmp_path / "missing.csv")),
        (str(tmp_path / "x.parquet"), ""),
        (None, str(bad), "text"),
    ]:
        text, rows, train_file, eval_file = import_export(*args)
        assert text.startswith("⚠️ ") and rows == [] and train_file is None and eval_file is None
    assert not (home / "datasets" / "transcripts").exists() or not any(
        (home / "datasets" / "transcripts").rglob("*.jsonl")
    )


def test_the_wired_import_sets_the_dataset_path(tiny_llama_dir, home):
    from ui_handlers import handlers

    from ui.views.train_actions import DATA_SOURCES

    report, shown, source, path, held_out = handlers(tiny_llama_dir)["on_import_export"](
        str(DEMO), "", "", "", 0.1
    )
    assert "Imported 9 conversations" in report and source == DATA_SOURCES[2]
    assert held_out == str(Path(path).with_name("eval.jsonl"))
    assert path.endswith("train.jsonl") and Path(path).is_file()
    info, frame = handlers(tiny_llama_dir)["on_data"](source, None, path)
    assert "messages=messages" in info and len(frame) > 0
