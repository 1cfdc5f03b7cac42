"""Faults on disk: corrupt adapter files, a read-only home and a full disk. Each ends in a
clear message; nothing on the shelf is partial, nothing saved before is lost, and the rest keep
working. (The training child killed, two starts at once: test_faults_in_training_runs.py.)

Covered elsewhere, not repeated here: a full disk before training
(tests/finetune/train/test_train_faults.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from run_helpers import tiny_run_config
from shelf_state import shelve, snapshot, visible_shelf
from tally import FAULTS
from ui_handlers import handlers

from adapters.shelf.store import Shelf
from core.store.home import close_stores
from finetune.data.load import load_rows
from finetune.train import runner
from inference.generate import GenerationSettings, compare
from inference.session import ModelSession

MSGS = [{"role": "user", "content": "Where is my order?"}]
SHORT = GenerationSettings(max_new_tokens=4)


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


def _cfg(model_dir: Path, name: str = "", **train):
    cfg = tiny_run_config(model_dir, **train)
    cfg.run.adapter_name = name
    return cfg


# --- corrupt adapter files --------------------------------------------------------------------


def test_corrupt_weights_or_manifest_are_listed_broken_and_the_rest_keep_working(
    tiny_llama_dir, random_lora_dir, home
):
    for name in ("good", "other", "truncated", "zeroed", "bad-json", "bomb", "wrong-format"):
        shelve(random_lora_dir, tiny_llama_dir, name)
    shelf = home / "adapters"
    weights = shelf / "truncated" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:300])
    (shelf / "zeroed" / "adapter_model.safetensors").write_bytes(b"")
    (shelf / "bad-json" / "manifest.json").write_text('{"format": "tunedesk-adapter/1", ')
    (shelf / "bomb" / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    (shelf / "wrong-format" / "manifest.json").write_text(json.dumps({"format": "other/9"}))

    entries = {e.name: e for e in Shelf().list()}
    reasons = {n: e.reason for n, e in entries.items() if not e.ok}
    assert reasons == {
        "truncated": reasons["truncated"],
        "zeroed": reasons["zeroed"],
        "bad-json": reasons["bad-json"],
        "bomb": "manifest.json is nested too deeply to be a manifest",
        "wrong-format": "manifest.json has format 'other/9', expected 'tunedesk-adapter/1'",
    }
    assert "adapter_model.safetensors is damaged" in reasons["truncated"]
    assert "adapter_model.safetensors is damaged" in reasons["zeroed"]
    assert reasons["bad-json"].startswith("manifest.json is not valid JSON")
    for name in reasons:
        FAULTS.add("corrupt adapter files", name)

    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    base = compare(session, MSGS, [None], SHORT)[0].text
    tuned = compare(session, MSGS, ["good"], SHORT)[0].text
    for name in ("truncated", "zeroed", "bad-json", "bomb"):  # refused with the shelf's reason
        with pytest.raises(
            ValueError, match=re.escape(f"adapter '{name}' is broken: {reasons[name]}")
        ):
            session.load_adapter(name)
    assert session.loaded_adapters == ["good"]

    # Corrupted while loaded: the next use runs the shelf's check, refuses, and drops it.
    (shelf / "good" / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="adapter 'good' is broken: adapter_model.safetensors"):
        compare(session, MSGS, ["good"], SHORT)
    assert "good" not in session.loaded_adapters
    FAULTS.add("corrupt adapter files", "corrupted while loaded")
    assert compare(session, MSGS, [None], SHORT)[0].text == base
    assert compare(session, MSGS, ["other"], SHORT)[0].text == tuned  # same weights as "good" had


# --- a read-only home, a full disk ------------------------------------------------------------


@pytest.fixture
def tmpfs_home(home):
    """``home`` on its own 2 MiB tmpfs; yields ``make(state)`` ("ro" / "rw").

    Where mounting is not allowed, a non-root user gets a read-only home through permissions
    instead (``make.mounted`` is False; full-disk tests skip); root is skipped, since chmod
    does not stop root's writes.
    """
    home.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(home)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode and os.geteuid() == 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip()}), and as root "
            "permissions cannot make the home read-only"
        )

    def make(state: str) -> None:
        if make.mounted:
            subprocess.run(["mount", "-o", f"remount,{state}", str(home)], check=True)
            return
        for folder in [home, *(p for p in home.rglob("*") if p.is_dir())]:
            folder.chmod(0o555 if state == "ro" else 0o755)

    make.mounted = mounted.returncode == 0
    yield make
    if make.mounted:
        subprocess.run(["umount", "-l", str(home)], check=True)
    else:
        make("rw")


def _feedback(prompt: str = "Where is my order?") -> tuple:
    shown = [
        {"adapter": "base", "adapter_hash": "h1", "text": "It is on its way."},
        {"adapter": "earlier", "adapter_hash": "h2", "text": "Track it with the link."},
    ]
    return prompt, shown, "earlier", ""


def test_read_only_home_gives_clear_errors_and_loses_nothing(
    tiny_llama_dir, random_lora_dir, home, tmpfs_home, tmp_path, ui
):
    from adapters.export import import_adapter
    from finetune.train import train
    from ui.tabs.train import DATA_SOURCES
    from ui.views import forms
    from ui.views.feedback import save_feedback
    from ui.views.uploads import store_upload

    shelve(random_lora_dir, tiny_llama_dir, "earlier")
    save_feedback(*_feedback())
    upload = tmp_path / "chats.jsonl"
    upload.write_text(json.dumps({"prompt": "hi", "completion": "hello"}) + "\n")
    archive = tmp_path / "incoming.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in random_lora_dir.iterdir():
            zf.write(f, f.name)
    close_stores()  # an open database is a file open for writing: the remount would be refused
    before = snapshot(home)
    tmpfs_home("ro")

    ro = "Read-only file system" if tmpfs_home.mounted else "Permission denied"
    at = re.escape(str(home))
    with pytest.raises(OSError, match=f"cannot write to {at}/adapters: {ro}"):
        train(_cfg(tiny_llama_dir))
    with pytest.raises(OSError, match=f"cannot write to {at}/runs: {ro}"):
        runner.start(_cfg(tiny_llama_dir))
    with pytest.raises(OSError, match=f"could not rename adapter 'earlier' to 'new': {ro}"):
        Shelf().rename("earlier", "new")
    with pytest.raises(OSError, match=f"could not delete adapter 'earlier': {ro}"):
        Shelf().delete("earlier")
    with pytest.raises(OSError, match=f"could not import {random_lora_dir.name} as 'copy': {ro}"):
        import_adapter(random_lora_dir, name="copy")
    with pytest.raises(OSError, match=f"could not save the feedback to {at}/.*: {ro}; the rows"):
        save_feedback(*_feedback("Another question"))
    with pytest.raises(OSError, match=f"could not keep a copy of chats.jsonl in {at}/.*: {ro}"):
        store_upload(str(upload))

    # What the user sees: one line each, no traceback.
    values = forms.form_values(forms.ui_defaults())
    message, run_id = ui["on_start"](DATA_SOURCES[0], None, "", *values)
    assert (
        message.startswith(f"⚠️ Not started: cannot write to {home}/runs: {ro}") and run_id is None
    )
    assert ui["on_rename"]("earlier", "new")[0].startswith("⚠️ could not rename adapter 'earlier'")
    assert ui["on_delete"]("earlier", True)[0].startswith("⚠️ could not delete adapter 'earlier'")
    assert ui["on_import"](str(archive), "")[0].startswith("⚠️ Import refused: could not import")
    assert ui["on_save"](*_feedback("Third")).startswith("⚠️ could not save the feedback")
    info, _ = ui["on_data"](DATA_SOURCES[1], str(upload), "")
    assert info.startswith("⚠️ could not keep a copy of chats.jsonl")

    assert snapshot(home) == before
    for op in ("train", "start run", "rename", "delete", "import", "feedback", "upload"):
        FAULTS.add("read-only home", op)
    tmpfs_home("rw")
    assert snapshot(home) == before
    assert visible_shelf(home) == ["earlier"]
    assert load_rows(home / "feedback" / "feedback.jsonl").num_rows == 1


def test_full_disk_while_saving_feedback_or_an_upload_leaves_no_half_row_or_file(
    home, tmpfs_home, tmp_path
):
    from ui.views.feedback import save_feedback
    from ui.views.uploads import store_upload

    if not tmpfs_home.mounted:
        pytest.skip("needs the home on a real 2 MiB tmpfs to fill it up")

    feedback = home / "feedback" / "feedback.jsonl"
    save_feedback(*_feedback())
    kept = feedback.read_bytes()
    upload = tmp_path / "chats.jsonl"
    upload.write_text(
        "".join(
            json.dumps({"prompt": f"q{i}", "completion": "a" * 1000}) + "\n" for i in range(200)
        )
    )  # 200 KB: more than the space left
    filler = home / "filler"
    with open(filler, "wb") as fh, pytest.raises(OSError):
        fh.write(b"x" * (4 << 20))  # more than the 2 MiB tmpfs holds
    os.truncate(filler, filler.stat().st_size - (64 << 10))  # 64 KiB left: writes go partway
    prompt, shown, choice, _ = _feedback("x" * 300_000)  # a row bigger than the space left

    with pytest.raises(
        OSError, match="No space left on device; the rows saved before are unchanged"
    ):
        save_feedback(prompt, shown, choice)
    with pytest.raises(OSError, match="could not keep a copy of chats.jsonl .*No space left"):
        store_upload(str(upload))
    assert feedback.read_bytes() == kept  # not one byte of the half-written row
    assert list((home / "datasets" / "uploads").iterdir()) == []  # no temp file, no stub
    FAULTS.add("disk full", "feedback row")
    FAULTS.add("disk full", "dataset upload")

    filler.unlink()
    save_feedback(prompt, shown, choice)
    rows = load_rows(feedback)
    assert rows.num_rows == 2 and rows[1]["instruction"] == prompt
    copy = Path(store_upload(str(upload)))
    assert copy.read_bytes() == upload.read_bytes()
