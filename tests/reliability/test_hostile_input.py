"""Hostile input: each bad upload, name, weight file or setting is refused with a clear message,
nothing crashes, nothing is read or written outside ``$TUNEDESK_HOME`` (fuzzing: test_fuzz.py).

Covered elsewhere, not repeated here: hostile adapter zips (tests/adapters/test_export.py), bad
names and symlinked adapter folders on the shelf (tests/adapters/test_store.py), bad rows and a
100 MB row (tests/finetune/data/test_data_bad_input.py, which also fuzzes rows and CSV bytes).
Counts of what was tried land in test-artifacts/hostile_inputs.json (see tally.py).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
import shutil
import warnings
import zipfile
from pathlib import Path

import pytest
from run_helpers import tiny_run_config
from tally import HOSTILE, write_all
from ui_handlers import handlers, last

from adapters.shelf.store import PICKLE_REASON, Shelf, file_hash
from core import models
from finetune.config import validate
from finetune.data.load import load_rows
from inference.generate import (
    MAX_BATCH_ROWS,
    GenerationSettings,
    compare,
    generate_batch,
    stream_chat,
)
from inference.session import ModelSession

ROOT = Path(__file__).resolve().parents[2]
MSGS = [{"role": "user", "content": "Where is my order?"}]


@pytest.fixture(scope="module", autouse=True)
def _write_tallies():
    yield
    write_all()


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


@pytest.fixture
def session(tiny_llama_dir, home):
    return ModelSession(str(tiny_llama_dir), dtype="float32")


def _warnings_of(fn, *args) -> tuple[object, list[str]]:
    """Run a handler; return its (last) value and the gr.Warning texts it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = last(fn(*args))
    return value, [str(w.message) for w in caught]


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
    "huge (sparse 201 MiB)": ("big.jsonl", lambda p: _sparse(p, 201 << 20),
                              "is 201 MiB; the upload limit is 200 MiB", None),
    "binary noise": ("noise.jsonl", _write(os.urandom(4096) + b"\0"), "binary content", None),
    "a PNG named .csv": ("photo.csv", _write(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "binary content", None),
    "zip bomb named .jsonl": ("rows.jsonl", _zip_bomb, "binary content", None),
    "gzip bomb named .json": ("rows.json", _write(gzip.compress(b"\0" * 50_000_000)),
                              "binary content", None),
    "gzip bomb, real name": ("rows.jsonl.gz", _write(gzip.compress(b"\0" * 1_000_000)),
                             "upload a .jsonl, .json, .csv, .parquet file", None),
    "zip archive": ("rows.zip", _zip_bomb, "upload a .jsonl, .json, .csv, .parquet file", None),
    "Parquet compression bomb": ("rows.parquet", _parquet_bomb, "unpacks to 10 MB, over the 1 MB",
                                 "1000000"),
    "text named .parquet": ("rows.parquet", _write(ROW), "not a Parquet file", None),
    "JSON nesting bomb [[[[": ("deep.json", _write("[" * 100_000 + "]" * 100_000),
                               "nested more than 64 levels deep", None),
    "JSONL nesting bomb in a field": (
        "deep.jsonl", _write('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "completion": "x"}\n'),
        "nested more than 64 levels deep", None),
    "JSONL nesting bomb, unclosed": ("deep2.jsonl", _write('{"prompt": ' + '{"a": ' * 60_000 + "\n"),
                                     "nested more than 64 levels deep", None),
    "one 9 MB JSON object": ("one.json", _write('{"prompt": "' + "x" * (9 << 20) + '"}'),
                             "holds one JSON value over 8 MB", None),
    "UTF-16 text": ("utf16.jsonl", _write(ROW.encode("utf-16")), "UTF-16-encoded; save the file as UTF-8",
                    None),
    "Latin-1 text": ("latin1.csv", _write("prompt,completion\nhé,ok\n".encode("latin-1")),
                     "not valid UTF-8 text (byte 0xe9 on line 2)", None),
    "empty file": ("empty.jsonl", _write(b""), "the file is empty", None),
    "wrong extension .txt": ("notes.txt", _write(ROW), "upload a .jsonl, .json, .csv, .parquet file", None),
    "wrong extension .exe": ("setup.exe", _write(b"MZ\x90\0"), "upload a .jsonl, .json, .csv, .parquet",
                             None),
    "CSV named .jsonl": ("table.jsonl", _write("prompt,completion\na,b\n"), "could not read it as JSON",
                         None),
    "JSON lines named .csv": ("rows.csv", _write(ROW), "has no rows", None),
}


@pytest.mark.parametrize("case", sorted(BAD_UPLOADS))
def test_bad_uploads_are_refused_with_a_clear_message(home, tmp_path, monkeypatch, ui, case):
    from ui.tabs.train import DATA_SOURCES
    from ui.views.state import store_upload

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
    with pytest.raises(ValueError, match=r"huge.jsonl: 1179 MB is over the 1074 MB limit"):
        load_rows(path)
    HOSTILE.add("uploads", "over 1 GiB on a typed path")


def test_upload_names_cannot_leave_the_uploads_folder(home, tmp_path):
    from ui.views.state import store_upload

    for stem in ("..", "...", "$(touch pwned)", "a;rm -rf ~", "\u202eevil", "CON", "x" * 300):
        path = tmp_path / f"{stem[:200]}.jsonl"
        path.write_text(ROW)
        kept = Path(store_upload(str(path)))
        assert kept.parent == home / "datasets" / "uploads" and kept.read_text() == ROW
        assert set(kept.stem) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
        HOSTILE.add("upload names", stem[:20])
    assert not Path("pwned").exists()


# --- CSV formulas -----------------------------------------------------------------------------

FORMULAS = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1:A9)", "=HYPERLINK(\"http://x\",\"y\")",
            "\t=1+1", "\r=1"]


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
        samples.append({
            "index": i, "intent": "=intent", "prompt": cell, "reference": f"-{cell}",
            "answers": {"base": f"@{cell}", "tuned": "plain answer"},
            "bleu": {"base": 1.0, "tuned": 2.0}, "rouge_l": {"base": 0.5, "tuned": 0.25},
            "delta": {"tuned": {"bleu": 1.0, "rouge_l": -0.25}}})
    metric = {"bleu": 1.0, "rouge_l": 0.5, "perplexity": 9.0, "golden_passed": 0, "golden_total": 0}
    ci = {"delta": -0.25, "low": -0.5, "high": 0.1}
    report = EvalReport(
        eval_id="20260101-000000-abcdef", created="2026-01-01T00:00:00", models=["base", "tuned"],
        metrics={"base": metric, "tuned": metric},
        deltas={"tuned": {"bleu": ci, "rouge_l": ci, "perplexity": ci}}, samples=samples,
        worse={"tuned": list(range(len(FORMULAS)))}, golden={"total": 0, "passed": {}, "results": []})
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


# --- names, paths and links -------------------------------------------------------------------

BAD_NAMES = ["../x", "../../etc/passwd", "/etc/passwd", "..", ".", "a/b", "a\\b", ".hidden",
             "x" * 65, "ok\n", "nul\x00x", "~root", "$(touch pwned)", "C:\\evil", "..%2f..%2fx"]


def shelve(peft_dir: Path, base_dir: Path, name: str) -> Path:
    folder = Shelf().root / name
    shutil.copytree(peft_dir, folder)
    manifest = {"format": "tunedesk-adapter/1", "name": name,
                "base_model": {"name": str(base_dir),
                               "weight_hash": models.resolve(str(base_dir)).weight_hash},
                "adapter_hash": file_hash(folder / "adapter_model.safetensors")}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_hostile_names_are_refused_at_every_entry_point(
        home, tmp_path, random_lora_dir, tiny_llama_dir, session):
    from adapters.export import export_merged, export_zip, import_adapter
    from eval.run import evaluate
    from finetune.train import runner

    shelve(random_lora_dir, tiny_llama_dir, "good")
    before, outside = _files(home), _files(tmp_path) - {f"home/{p}" for p in _files(home)}
    shelf = Shelf()
    entry_points = {
        "shelf.get": lambda n: shelf.get(n), "shelf.delete": lambda n: shelf.delete(n),
        "shelf.rename from": lambda n: shelf.rename(n, "fine"),
        "shelf.rename to": lambda n: shelf.rename("good", n),
        "shelf.write_manifest_fields": lambda n: shelf.write_manifest_fields(n, {"x": 1}),
        "import name": lambda n: import_adapter(random_lora_dir, name=n),
        "export zip": lambda n: export_zip(n), "export merged": lambda n: export_merged(n),
        "session.load_adapter": lambda n: session.load_adapter(n),
        "evaluate": lambda n: evaluate(session, [n], str(ROOT / "assets" / "demo_support.jsonl"),
                                       max_samples=2, golden=None),
        "runner.get": lambda n: runner.get(n), "runner.stop": lambda n: runner.stop(n),
    }
    for label, call in entry_points.items():
        for name in BAD_NAMES:
            with pytest.raises(ValueError, match="invalid|refused|outside|no adapter") as info:
                call(name)
                pytest.fail(f"{label} accepted {name!r}")
            assert "\n" not in str(info.value).replace(repr(name), ""), (label, name)
            HOSTILE.add("hostile names", label)
    cfg = tiny_run_config(tiny_llama_dir)
    for name in BAD_NAMES:
        cfg.run.adapter_name = name
        assert any("invalid adapter name" in p for p in validate(cfg)), name
        HOSTILE.add("hostile names", "training config")

    assert _files(home) == before and shelf.get("good").ok
    assert _files(tmp_path) - {f"home/{p}" for p in _files(home)} == outside
    assert not Path("pwned").exists()


def test_links_out_of_the_home_are_not_followed(home, tmp_path, random_lora_dir, tiny_llama_dir,
                                                session):
    from adapters.export import export_zip, import_adapter

    outside = tmp_path / "outside"
    shutil.copytree(random_lora_dir, outside)
    (home / "adapters").mkdir(parents=True)
    (home / "adapters" / "linked").symlink_to(outside, target_is_directory=True)
    inner = shelve(random_lora_dir, tiny_llama_dir, "inner-link")
    (inner / "adapter_model.safetensors").unlink()
    (inner / "adapter_model.safetensors").symlink_to(outside / "adapter_model.safetensors")
    smuggler = tmp_path / "smuggler"  # an import source whose files are links to secrets
    smuggler.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"secret")
    for f in random_lora_dir.iterdir():
        (smuggler / f.name).symlink_to(tmp_path / "secret.bin" if f.suffix == ".safetensors" else f)

    entries = {e.name: e for e in Shelf().list()}
    assert "points outside" in entries["linked"].reason
    assert "points outside" in entries["inner-link"].reason
    for name in ("linked", "inner-link"):
        with pytest.raises(ValueError, match="outside"):
            session.load_adapter(name)
        with pytest.raises(ValueError, match="outside"):
            export_zip(name) if name == "linked" else Shelf().base_of(name)
    with pytest.raises(ValueError, match="not a usable LoRA adapter: .* is missing"):
        import_adapter(smuggler, name="smuggled")
    assert not (home / "adapters" / "smuggled").exists() and _files(home / "exports") == set()
    for case in ("linked adapter folder", "linked weights file", "import of linked files"):
        HOSTILE.add("links out of the home", case)


def test_pickle_weights_never_run(home, tmp_path, random_lora_dir, tiny_llama_dir, session):
    import torch

    from adapters.export import import_adapter

    marker = tmp_path / "pickle-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))  # unpickling would create the marker file

    evil = tmp_path / "evil"
    shutil.copytree(random_lora_dir, evil)
    (evil / "adapter_model.safetensors").unlink()
    torch.save({"base_model.model.lora_A": Payload()}, evil / "adapter_model.bin")
    shutil.copytree(evil, home / "adapters" / "evil")

    assert Shelf().get("evil").reason == PICKLE_REASON
    with pytest.raises(ValueError, match=re.escape(f"adapter 'evil' is broken: {PICKLE_REASON}")):
        session.load_adapter("evil")  # the shelf's own reason
    with pytest.raises(ValueError, match="pickle weights"):
        import_adapter(evil, name="evil-import")
    with pytest.raises(ValueError, match="could not be read safely"):
        import_adapter(evil, name="evil-import", allow_pickle=True)  # opted in: weights_only load
    assert not marker.exists() and not (home / "adapters" / "evil-import").exists()
    for case in ("listed", "session load", "import", "import with allow_pickle"):
        HOSTILE.add("pickle weights", case)


# --- generation settings and batch sizes ------------------------------------------------------

BAD_SETTINGS = [
    ("max_new_tokens", 10**9), ("max_new_tokens", -5), ("max_new_tokens", 0), ("max_new_tokens", 2.5),
    ("max_new_tokens", True), ("max_new_tokens", "100"), ("max_new_tokens", None),
    ("temperature", math.nan), ("temperature", math.inf), ("temperature", -0.1), ("temperature", 3),
    ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5), ("top_p", math.nan), ("top_k", -1),
    ("top_k", 10**6), ("repetition_penalty", 0.5), ("repetition_penalty", math.nan), ("seed", -1),
    ("seed", 2**70), ("seed", 1.5), ("min_new_tokens", 10**6), ("system_prompt", 42),
]


@pytest.mark.parametrize("field, value", BAD_SETTINGS, ids=[f"{f}={v!r}" for f, v in BAD_SETTINGS])
def test_bad_generation_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"invalid generation settings: {field} must"):
        GenerationSettings(**{field: value}).check()
    HOSTILE.add("generation settings", field)


def test_form_values_become_value_errors_never_type_errors(ui):
    engine = ui["engine"]
    good = ["", 200, 0.0, 0.9, 1.1, 0]
    assert engine.settings(*good[:5], 7.0).seed == 7
    for index, value in [(5, None), (1, None), (1, math.nan), (2, None), (3, "x"), (1, 10**7)]:
        values = list(good)
        values[index] = value
        with pytest.raises(ValueError, match="invalid generation settings"):
            engine.settings(*values)
        HOSTILE.add("generation settings", "form value")


def test_the_ui_shows_refused_settings_and_sizes(ui, home):
    from ui.views.state import BASE_LABEL

    history, shown = _warnings_of(ui["respond"], [], "hello", BASE_LABEL, "", 200, 0.0, 0.9, 1.0, None)
    assert history == ([{"role": "user", "content": "hello"}], "")  # no half answer added
    assert len(shown) == 1 and "seed must be a whole number" in shown[0]
    panes, shown = _warnings_of(ui["run"], None, None, "hello", "", 0, 1.0)
    assert "max_new_tokens must be a whole number from 1 to 2048" in shown[0]
    assert panes[3] == ""  # no timing line: nothing ran
    names = [f"a{i}" for i in range(5)]
    status = ui["on_run"](names, "assets/demo_support.jsonl", 40, 128, 8, False, "intent", 0)[0]
    assert status.startswith("⚠️ cannot evaluate: 5 adapters, but the session holds at most 4")
    status = ui["on_run"](["a0"], "assets/demo_support.jsonl", 10**6, 128, 1000, False, "intent", 0)[0]
    assert "max_samples must be a whole number from 1 to 10000, got 1000000" in status
    assert "batch_size must be a whole number from 1 to 64, got 1000" in status
    for case in ("chat", "compare", "evaluate adapters", "evaluate rows and batch"):
        HOSTILE.add("oversized settings in the UI", case)


def test_oversized_batches_and_prompts_are_refused_before_generating(session, home):
    settings = GenerationSettings(max_new_tokens=2)
    with pytest.raises(ValueError, match=f"65 answers in one call; at most {MAX_BATCH_ROWS}"):
        compare(session, MSGS, [None] * 65, settings)
    with pytest.raises(ValueError, match="5 different adapters in one call, but the session holds"):
        compare(session, MSGS, [None, "a", "b", "c", "d", "e"], settings)
    with pytest.raises(ValueError, match="65 answers in one call"):
        generate_batch(session, [MSGS] * 65, [None] * 65, settings)
    assert session.status()["state"] == "not loaded"  # refused before the model was touched

    pasted = [{"role": "user", "content": "where is my order " * 400}]  # far past 256 positions
    with pytest.raises(ValueError, match=r"the conversation is \d+ tokens; this model reads at most 256"):
        compare(session, pasted, [None], settings)
    with pytest.raises(ValueError, match="this model reads at most 256"):
        next(stream_chat(session, pasted, None, settings))
    assert len(compare(session, MSGS, [None], settings)) == 1  # still serving, lock free
    for case in ("65 compare panes", "6 adapters in one call", "65 batch prompts", "a pasted book"):
        HOSTILE.add("oversized generation", case)
