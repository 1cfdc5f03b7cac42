"""Hostile uploads: each bad data file or file name is refused with a clear message or kept under
a cleaned name, nothing crashes, nothing is kept outside ``$TUNEDESK_HOME/datasets/uploads``;
spreadsheet formulas stay training text and are neutralised in the exported samples.csv.
(Names, links and weights: test_hostile_names_and_weights.py; generation settings:
test_hostile_generation_settings.py; fuzzing: test_fuzz.py.)

Covered elsewhere, not repeated here: bad rows and a 100 MB row
(tests/finetune/data/test_data_bad_input.py, which also fuzzes rows and CSV bytes).
Counts of what was tried land in test-artifacts/hostile_inputs.json (see tally.py).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import zipfile
from pathlib import Path

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from tally import HOSTILE
from ui_handlers import handlers

from finetune.data.load import load_rows


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


# --- uploads ----------------------------------------------------------------------------------


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:  # a hole, not data: no disk space used
        fh.truncate(size)
    return path


def _zip_bomb(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("rows.jsonl", b"\0" * 50_000_000)  # 50 MB of zeros in ~50 KB
    return path


def _parquet_bomb(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"prompt": ["x" * 5_000_000, "y" * 5_000_000], "completion": ["a", "b"]})
    pq.write_table(table, path, compression="zstd")  # 10 MB of text in ~1 KB
    return path


def _write(content: str | bytes):
    def build(path: Path) -> Path:
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path

    return build


ROW = '{"prompt": "Where is my order?", "completion": "It ships today."}\n'
# name: (file name, builder, what the message must say, TUNEDESK_MAX_DATA_BYTES or None)
BAD_UPLOADS = {
    "huge (sparse 201 MiB)": (
        "big.jsonl",
        lambda p: _sparse(p, 201 << 20),
        "is 201 MiB; the upload limit is 200 MiB",
        None,
    ),
    "binary noise": ("noise.jsonl", _write(os.urandom(4096) + b"\0"), "binary content", None),
    "a PNG named .csv": (
        "photo.csv",
        _write(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
        "binary content",
        None,
    ),
    "zip bomb named .jsonl": ("rows.jsonl", _zip_bomb, "binary content", None),
    "gzip bomb named .json": (
        "rows.json",
        _write(gzip.compress(b"\0" * 50_000_000)),
        "binary content",
        None,
    ),
    "gzip bomb, real name": (
        "rows.jsonl.gz",
        _write(gzip.compress(b"\0" * 1_000_000)),
        "upload a .jsonl, .json, .csv, .parquet file",
        None,
    ),
    "zip archive": ("rows.zip", _zip_bomb, "upload a .jsonl, .json, .csv, .parquet file", None),
    "Parquet compression bomb": (
        "rows.parquet",
        _parquet_bomb,
        "MiB, over the limit of 976.6 KiB",
        "1000000",
    ),
    "text named .parquet": ("rows.parquet", _write(ROW), "not a Parquet file", None),
    "JSON nesting bomb [[[[": (
        "deep.json",
        _write("[" * 100_000 + "]" * 100_000),
        "nested more than 64 levels deep",
        None,
    ),
    "JSONL nesting bomb in a field": (
        "deep.jsonl",
        _write('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "completion": "x"}\n'),
        "nested more than 64 levels deep",
        None,
    ),
    "JSONL nesting bomb, unclosed": (
        "deep2.jsonl",
        _write('{"prompt": ' + '{"a": ' * 60_000 + "\n"),
        "nested more than 64 levels deep",
        None,
    ),
    "one 9 MB JSON object": (
        "one.json",
        _write('{"prompt": "' + "x" * (9 << 20) + '"}'),
        "holds one JSON value over 8 MB",
        None,
    ),
    "UTF-16 text": (
        "utf16.jsonl",
        _write(ROW.encode("utf-16")),
        "UTF-16-encoded; save the file as UTF-8",
        None,
    ),
    "Latin-1 text": (
        "latin1.csv",
        _write("prompt,completion\nhé,ok\n".encode("latin-1")),
        "not valid UTF-8 text (byte 0xe9 on line 2)",
        None,
    ),
    "empty file": ("empty.jsonl", _write(b""), "the file is empty", None),
    "wrong extension .txt": (
        "notes.txt",
        _write(ROW),
        "upload a .jsonl, .json, .csv, .parquet file",
        None,
    ),
    "wrong extension .exe": (
        "setup.exe",
        _write(b"MZ\x90\0"),
        "upload a .jsonl, .json, .csv, .parquet",
        None,
    ),
    "CSV named .jsonl": (
        "table.jsonl",
        _write("prompt,completion\na,b\n"),
        "could not read it as JSON",
        None,
    ),
    "JSON lines named .csv": ("rows.csv", _write(ROW), "has no rows", None),
}


@pytest.mark.parametrize("case", sorted(BAD_UPLOADS))
def test_bad_uploads_are_refused_with_a_clear_message(home, tmp_path, monkeypatch, ui, case):
    from ui.tabs.train import DATA_SOURCES
    from ui.views.uploads import store_upload

    name, build, expected, limit = BAD_UPLOADS[case]
    if limit:
        monkeypatch.setenv("TUNEDESK_MAX_DATA_BYTES", limit)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    path = build(incoming / name)
    before = _files(tmp_path)

    with pytest.raises(ValueError) as info:
        store_upload(str(path))
    message = str(info.value)
    assert name in message and expected in message and "\n" not in message, message
    shown, _ = ui["on_data"](DATA_SOURCES[1], str(path), "")  # what the Train tab shows
    assert shown == f"⚠️ {message}"
    assert _files(home / "datasets") == set() and _files(tmp_path) == before  # nothing kept
    HOSTILE.add("uploads", case)


def test_oversized_file_on_a_typed_path_is_refused_without_reading_it(tmp_path):
    path = _sparse(tmp_path / "huge.jsonl", (1 << 30) + (100 << 20))  # 1.1 GiB of holes
    with pytest.raises(ValueError, match=r"huge.jsonl: 1.1 GiB is over the limit of 1 GiB "):
        load_rows(path)
    HOSTILE.add("uploads", "over 1 GiB on a typed path")


def test_upload_names_cannot_leave_the_uploads_folder(home, tmp_path):
    from ui.views.uploads import store_upload

    for stem in ("..", "...", "$(touch pwned)", "a;rm -rf ~", "\u202eevil", "CON", "x" * 300):
        path = tmp_path / f"{stem[:200]}.jsonl"
        path.write_text(ROW)
        kept = Path(store_upload(str(path)))
        assert kept.parent == home / "datasets" / "uploads" and kept.read_text() == ROW
        assert set(kept.stem) <= set(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
        )
        HOSTILE.add("upload names", stem[:20])
    assert not Path("pwned").exists()


# --- CSV formulas -----------------------------------------------------------------------------

FORMULAS = [
    "=cmd|' /C calc'!A0",
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    '=HYPERLINK("http://x","y")',
    "\t=1+1",
    "\r=1",
]


def test_formula_cells_are_training_text_not_formulas(tmp_path):
    path = tmp_path / "formulas.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "completion"])
        for cell in FORMULAS:
            writer.writerow([cell, f"answer {cell}"])
    rows = load_rows(path)
    assert rows["prompt"] == FORMULAS and rows["completion"] == [f"answer {c}" for c in FORMULAS]
    HOSTILE.add("CSV formula injection", "kept as text for training")


def test_the_exported_samples_csv_neutralises_formulas(home):
    from eval.report import EvalReport, save_report

    samples = []
    for i, cell in enumerate(FORMULAS):
        samples.append(
            {
                "index": i,
                "intent": "=intent",
                "prompt": cell,
                "reference": f"-{cell}",
                "answers": {"base": f"@{cell}", "tuned": "plain answer"},
                "bleu": {"base": 1.0, "tuned": 2.0},
                "rouge_l": {"base": 0.5, "tuned": 0.25},
                "delta": {"tuned": {"bleu": 1.0, "rouge_l": -0.25}},
            }
        )
    metric = {"bleu": 1.0, "rouge_l": 0.5, "perplexity": 9.0, "golden_passed": 0, "golden_total": 0}
    ci = {"delta": -0.25, "low": -0.5, "high": 0.1}
    report = EvalReport(
        eval_id="20260101-000000-abcdef",
        created="2026-01-01T00:00:00",
        models=["base", "tuned"],
        metrics={"base": metric, "tuned": metric},
        deltas={"tuned": {"bleu": ci, "rouge_l": ci, "perplexity": ci}},
        samples=samples,
        worse={"tuned": list(range(len(FORMULAS)))},
        golden={"total": 0, "passed": {}, "results": []},
    )
    folder = save_report(report)

    with open(folder / "samples.csv", newline="", encoding="utf-8") as fh:
        header, *rows = list(csv.reader(fh))
    texts = ("intent", "prompt", "reference", "answer_base", "answer_tuned")
    for row, cell in zip(rows, FORMULAS, strict=True):
        by = dict(zip(header, row, strict=True))
        assert by["prompt"] == "'" + cell and by["reference"] == "'-" + cell
        assert by["answer_base"] == "'@" + cell and by["intent"] == "'=intent"
        assert by["answer_tuned"] == "plain answer"
        assert float(by["delta_rouge_l_tuned"]) == -0.25  # numbers stay numbers
        assert not any(by[c].startswith(("=", "+", "-", "@", "\t", "\r")) for c in texts)
    assert json.loads((folder / "report.json").read_text())["samples"][0]["prompt"] == FORMULAS[0]
    HOSTILE.add("CSV formula injection", "neutralised in samples.csv")
