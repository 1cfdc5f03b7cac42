"""Faults: the training child killed mid-save, corrupt adapters, a read-only or full home, and
two app processes starting training at once. Each ends in a truthful status and a clear
message; nothing on the shelf is partial and nothing saved before is lost.

Covered elsewhere, not repeated here: SIGKILL before the first checkpoint, right after a
checkpoint and after the save, plus an app restart re-attaching (tests/finetune/train/test_runner.py);
a full disk before training (tests/finetune/train/test_train_faults.py); two tabs pressing Start in one
app (test_runner.py, tests/e2e/test_browser.py).

The exact kill points inside the atomic adapter save come from a test-only hook
(``hooks/sitecustomize.py``) that the training child loads through PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from run_helpers import tiny_run_config
from run_helpers import wait_until as _wait
from tally import FAULTS, write_all
from ui_handlers import handlers

from adapters.shelf.store import Shelf, file_hash
from core import models
from core.events import read_events
from finetune.data.load import load_rows
from finetune.train import runner
from finetune.train.saving import latest_checkpoint
from inference.generate import GenerationSettings, compare
from inference.session import ModelSession

ROOT = Path(__file__).resolve().parents[2]
HOOKS = Path(__file__).resolve().parent / "hooks"
MSGS = [{"role": "user", "content": "Where is my order?"}]
SHORT = GenerationSettings(max_new_tokens=4)


@pytest.fixture(scope="module", autouse=True)
def _write_tallies():
    yield
    write_all()


# --- helpers ----------------------------------------------------------------------------------

def _kinds(run_dir: Path) -> list[str]:
    return [e["type"] for e in read_events(run_dir / "events.jsonl")[0]]


def _still_running(run_id: str) -> None:
    status = runner.get(run_id).status
    if status["state"] not in runner.ACTIVE:
        raise AssertionError(f"{run_id} ended early: {status}")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


def _final(run_id: str) -> dict:
    def ended():
        status = runner.get(run_id).status
        return status if status["state"] not in runner.ACTIVE else None

    return _wait(ended, f"{run_id} to end")


def _visible_shelf(home: Path) -> list[str]:
    """Adapter folders a user sees; each must be whole and usable."""
    entries = Shelf().list()
    assert all(e.ok for e in entries), [(e.name, e.reason) for e in entries if not e.ok]
    assert {e.name for e in entries} == {p.name for p in (home / "adapters").iterdir()
                                         if not p.name.startswith(".")}
    return sorted(e.name for e in entries)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def shelve(peft_dir: Path, base_dir: Path, name: str) -> Path:
    """Put a copy of a LoRA adapter on the shelf with a manifest like the trainer writes."""
    folder = Shelf().root / name
    shutil.copytree(peft_dir, folder)
    manifest = {"format": "tunedesk-adapter/1", "name": name, "created": "2026-01-01T00:00:00",
                "base_model": {"name": str(base_dir),
                               "weight_hash": models.resolve(str(base_dir)).weight_hash},
                "adapter_hash": file_hash(folder / "adapter_model.safetensors")}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _cfg(model_dir: Path, name: str = "", **train):
    cfg = tiny_run_config(model_dir, **train)
    cfg.run.adapter_name = name
    return cfg


# --- SIGKILL inside the atomic save -----------------------------------------------------------

SAVE_POINTS = {
    # point: (final state, is the adapter on the shelf?)
    "start": ("failed", False),  # temp folder made, nothing written
    "written": ("failed", False),  # every file written into the temp folder, not renamed
    "renamed": ("done", True),  # on the shelf; killed before the "saved" event
}


def test_sigkill_inside_the_adapter_save_never_leaves_a_partial_adapter(
        tiny_llama_dir, random_lora_dir, home, tmp_path, monkeypatch):
    earlier = shelve(random_lora_dir, tiny_llama_dir, "earlier")
    before = _snapshot(earlier)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HOOKS), str(ROOT)]))
    for point, (state, kept) in SAVE_POINTS.items():
        mark, run_id, name = tmp_path / f"{point}.mark", f"kill-{point}", f"mid-{point}"
        monkeypatch.setenv("TUNEDESK_TEST_SAVE_PAUSE", point)
        monkeypatch.setenv("TUNEDESK_TEST_SAVE_MARK", str(mark))
        info = runner.start(_cfg(tiny_llama_dir, name, max_steps=2), run_id=run_id)

        def at_pause(mark=mark, run_id=run_id):
            return mark.is_file() and mark.read_text() or _still_running(run_id)

        paused = Path(_wait(at_pause, f"the save to pause at {point!r}"))
        assert "saved" not in _kinds(info.run_dir)  # the kill lands inside the save
        _kill(info.status["pid"])
        final = _final(run_id)

        assert final["state"] == state and "killed by signal 9" in final["reason"], final
        assert (home / "adapters" / name).exists() == kept
        if kept:  # the rename is the commit point: the whole adapter is there, and reported
            assert paused == home / "adapters" / name and final["adapter"] == name
            assert "the adapter was saved, then the process ended" in final["reason"]
        else:  # what was written stays in a hidden temp folder that the shelf never lists
            assert paused.parent == home / "adapters" and paused.name.startswith(f".tmp-{name}-")
            files = sorted(p.name for p in paused.iterdir())
            assert files == ([] if point == "start" else
                             ["README.md", "adapter_config.json", "adapter_model.safetensors",
                              "manifest.json"])
            assert "adapter" not in final and final["log_tail"] is not None
        assert _visible_shelf(home) == sorted(["earlier"] + ["mid-renamed"] * kept)
        FAULTS.add("sigkill inside the adapter save", f"at {point}: {final['state']}")
    monkeypatch.delenv("TUNEDESK_TEST_SAVE_PAUSE")

    assert _snapshot(earlier) == before
    assert {r.run_id: r.state for r in runner.list_runs()} == {
        "kill-start": "failed", "kill-written": "failed", "kill-renamed": "done"}
    # The app keeps serving: both adapters answer in one batched call next to the base.
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    answers = compare(session, MSGS, [None, "earlier", "mid-renamed"], SHORT)
    assert [a.adapter for a in answers] == ["base", "earlier", "mid-renamed"]


def test_sigkill_at_random_moments_keeps_checkpoints_and_the_shelf_whole(
        tiny_llama_dir, random_lora_dir, home):
    # A checkpoint is written after every step, so a random kill often lands inside one.
    earlier = shelve(random_lora_dir, tiny_llama_dir, "earlier")
    before = _snapshot(earlier)
    rng = random.Random(20261121)
    for i in range(3):
        run_id = f"random-{i}"
        info = runner.start(_cfg(tiny_llama_dir, max_steps=400, save_every=1), run_id=run_id)

        def checkpointed(info=info, run_id=run_id):
            return "checkpoint" in _kinds(info.run_dir) or _still_running(run_id)

        _wait(checkpointed, "the first checkpoint")
        time.sleep(rng.uniform(0.0, 1.5))
        _kill(info.status["pid"])
        final = _final(run_id)
        assert final["state"] == "failed" and final["reason"] == "killed by signal 9", final

        visible = [p for p in (info.run_dir / "checkpoints").iterdir() if not p.name.startswith(".")]
        for ckpt in visible:  # every checkpoint a resume could pick is complete and readable
            from safetensors import safe_open

            assert {"adapter_model.safetensors", "trainer_state.pt"} <= {p.name for p in ckpt.iterdir()}
            with safe_open(str(ckpt / "adapter_model.safetensors"), framework="pt") as fh:
                assert any("lora_" in k for k in fh.keys())  # noqa: SIM118
        assert latest_checkpoint(info.run_dir) == max(visible)
        assert _visible_shelf(home) == ["earlier"]
        torn = any(p.name.startswith((".tmp-", ".trash-")) for p in (info.run_dir / "checkpoints").iterdir())
        FAULTS.add("sigkill at a random moment", "inside a checkpoint write" if torn else "between writes")
    assert _snapshot(earlier) == before


# --- corrupt adapter files --------------------------------------------------------------------

def test_corrupt_weights_or_manifest_are_listed_broken_and_the_rest_keep_working(
        tiny_llama_dir, random_lora_dir, home):
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
        "truncated": reasons["truncated"], "zeroed": reasons["zeroed"],
        "bad-json": reasons["bad-json"], "bomb": "manifest.json is nested too deeply to be a manifest",
        "wrong-format": "manifest.json has format 'other/9', expected 'tunedesk-adapter/1'"}
    assert "adapter_model.safetensors is damaged" in reasons["truncated"]
    assert "adapter_model.safetensors is damaged" in reasons["zeroed"]
    assert reasons["bad-json"].startswith("manifest.json is not valid JSON")
    for name in reasons:
        FAULTS.add("corrupt adapter files", name)

    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    base = compare(session, MSGS, [None], SHORT)[0].text
    tuned = compare(session, MSGS, ["good"], SHORT)[0].text
    for name in ("truncated", "zeroed", "bad-json", "bomb"):  # refused with the shelf's reason
        with pytest.raises(ValueError, match=re.escape(f"adapter '{name}' is broken: {reasons[name]}")):
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
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(home)],
                             capture_output=True, text=True)
    if mounted.returncode and os.geteuid() == 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}), and as root "
                    "permissions cannot make the home read-only")

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


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


def _feedback(prompt: str = "Where is my order?") -> tuple:
    shown = [{"adapter": "base", "adapter_hash": "h1", "text": "It is on its way."},
             {"adapter": "earlier", "adapter_hash": "h2", "text": "Track it with the link."}]
    return prompt, shown, "earlier", ""


def test_read_only_home_gives_clear_errors_and_loses_nothing(
        tiny_llama_dir, random_lora_dir, home, tmpfs_home, tmp_path, ui):
    from adapters.export import import_adapter
    from finetune.train import train
    from ui.tabs.train import DATA_SOURCES
    from ui.views import forms
    from ui.views.feedback import save_feedback
    from ui.views.state import store_upload

    shelve(random_lora_dir, tiny_llama_dir, "earlier")
    save_feedback(*_feedback())
    upload = tmp_path / "chats.jsonl"
    upload.write_text(json.dumps({"prompt": "hi", "completion": "hello"}) + "\n")
    archive = tmp_path / "incoming.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in random_lora_dir.iterdir():
            zf.write(f, f.name)
    before = _snapshot(home)
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
    assert message.startswith(f"⚠️ Not started: cannot write to {home}/runs: {ro}") and run_id is None
    assert ui["on_rename"]("earlier", "new")[0].startswith("⚠️ could not rename adapter 'earlier'")
    assert ui["on_delete"]("earlier", True)[0].startswith("⚠️ could not delete adapter 'earlier'")
    assert ui["on_import"](str(archive), "")[0].startswith("⚠️ Import refused: could not import")
    assert ui["on_save"](*_feedback("Third")).startswith("⚠️ could not save the feedback")
    info, _ = ui["on_data"](DATA_SOURCES[1], str(upload), "")
    assert info.startswith("⚠️ could not keep a copy of chats.jsonl")

    assert _snapshot(home) == before
    for op in ("train", "start run", "rename", "delete", "import", "feedback", "upload"):
        FAULTS.add("read-only home", op)
    tmpfs_home("rw")
    assert _snapshot(home) == before
    assert _visible_shelf(home) == ["earlier"]
    assert load_rows(home / "feedback" / "feedback.jsonl").num_rows == 1


def test_full_disk_while_saving_feedback_or_an_upload_leaves_no_half_row_or_file(
        home, tmpfs_home, tmp_path):
    from ui.views.feedback import save_feedback
    from ui.views.state import store_upload

    if not tmpfs_home.mounted:
        pytest.skip("needs the home on a real 2 MiB tmpfs to fill it up")

    feedback = home / "feedback" / "feedback.jsonl"
    save_feedback(*_feedback())
    kept = feedback.read_bytes()
    upload = tmp_path / "chats.jsonl"
    upload.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": "a" * 1000}) + "\n"
                              for i in range(200)))  # 200 KB: more than the space left
    filler = home / "filler"
    with open(filler, "wb") as fh, pytest.raises(OSError):
        fh.write(b"x" * (4 << 20))  # more than the 2 MiB tmpfs holds
    os.truncate(filler, filler.stat().st_size - (64 << 10))  # 64 KiB left: writes go partway
    prompt, shown, choice, _ = _feedback("x" * 300_000)  # a row bigger than the space left

    with pytest.raises(OSError, match="No space left on device; the rows saved before are unchanged"):
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


# --- two app processes press Start together ---------------------------------------------------

def test_two_app_processes_starting_at_once_get_one_run_and_one_clear_refusal(
        tiny_llama_dir, home, ui):
    from ui.tabs.train import DATA_SOURCES
    from ui.views import forms

    go = time.time() + 8  # both processes import, then start at this moment
    code = textwrap.dedent(f"""
        import json, time
        from finetune.train import runner
        from finetune.config import RunConfig
        cfg = RunConfig.from_dict({_cfg(tiny_llama_dir, max_steps=400).to_dict()!r})
        time.sleep(max(0, {go} - time.time()))
        try:
            print(json.dumps({{"ok": runner.start(cfg).run_id}}))
        except RuntimeError as err:
            print(json.dumps({{"refused": str(err)}}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=os.environ,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    started = [r["ok"] for r in results if "ok" in r]
    refused = [r["refused"] for r in results if "refused" in r]
    assert len(started) == 1 and len(refused) == 1, results
    run_id = started[0]
    assert refused[0].startswith(f"run {run_id} is still ")

    # A third start from the Train tab is told the same, in words.
    message, new_id = ui["on_start"](DATA_SOURCES[0], None, "", *forms.form_values(forms.ui_defaults()))
    assert message == (f"⚠️ Not started: run {run_id} is still running; "
                       "stop it or wait for it to finish") and new_id is None
    assert [r.run_id for r in runner.list_runs()] == [run_id]
    FAULTS.add("two starts at once", "two app processes + the Train tab")
    _kill(runner.get(run_id).status["pid"])
    assert _final(run_id)["state"] == "failed"
