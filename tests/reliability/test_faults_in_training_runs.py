"""Faults in training runs: the training child killed inside the adapter save or at random
moments while it checkpoints, and two app processes starting training at once. Each ends in a
truthful status and a clear message; nothing on the shelf is partial and nothing saved before
is lost. (Damaged files and a read-only or full home: test_faults_on_disk.py.)

Covered elsewhere, not repeated here: SIGKILL before the first checkpoint, right after a
checkpoint and after the save, plus an app restart re-attaching
(tests/finetune/train/test_runner.py); two tabs pressing Start in one app (test_runner.py,
tests/e2e/test_browser.py).

The exact kill points inside the atomic adapter save come from a test-only hook
(``hooks/sitecustomize.py``) that the training child loads through PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from run_helpers import tiny_run_config
from run_helpers import wait_until as _wait
from shelf_state import shelve, snapshot, visible_shelf
from tally import FAULTS
from ui_handlers import handlers

from core.events import read_events
from finetune.train import runner
from finetune.train.saving import latest_checkpoint
from inference.generate import GenerationSettings, compare
from inference.session import ModelSession

ROOT = Path(__file__).resolve().parents[2]
HOOKS = Path(__file__).resolve().parent / "hooks"
MSGS = [{"role": "user", "content": "Where is my order?"}]
SHORT = GenerationSettings(max_new_tokens=4)


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


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
    tiny_llama_dir, random_lora_dir, home, tmp_path, monkeypatch
):
    earlier = shelve(random_lora_dir, tiny_llama_dir, "earlier")
    before = snapshot(earlier)
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
            assert files == (
                []
                if point == "start"
                else [
                    "README.md",
                    "adapter_config.json",
                    "adapter_model.safetensors",
                    "manifest.json",
                ]
            )
            assert "adapter" not in final and final["log_tail"] is not None
        assert visible_shelf(home) == sorted(["earlier"] + ["mid-renamed"] * kept)
        FAULTS.add("sigkill inside the adapter save", f"at {point}: {final['state']}")
    monkeypatch.delenv("TUNEDESK_TEST_SAVE_PAUSE")

    assert snapshot(earlier) == before
    assert {r.run_id: r.state for r in runner.list_runs()} == {
        "kill-start": "failed",
        "kill-written": "failed",
        "kill-renamed": "done",
    }
    # The app keeps serving: both adapters answer in one batched call next to the base.
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    answers = compare(session, MSGS, [None, "earlier", "mid-renamed"], SHORT)
    assert [a.adapter for a in answers] == ["base", "earlier", "mid-renamed"]


def test_sigkill_at_random_moments_keeps_checkpoints_and_the_shelf_whole(
    tiny_llama_dir, random_lora_dir, home
):
    # A checkpoint is written after every step, so a random kill often lands inside one.
    earlier = shelve(random_lora_dir, tiny_llama_dir, "earlier")
    before = snapshot(earlier)
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

        visible = [
            p for p in (info.run_dir / "checkpoints").iterdir() if not p.name.startswith(".")
        ]
        for ckpt in visible:  # every checkpoint a resume could pick is complete and readable
            from safetensors import safe_open

            assert {"adapter_model.safetensors", "trainer_state.pt"} <= {
                p.name for p in ckpt.iterdir()
            }
            with safe_open(str(ckpt / "adapter_model.safetensors"), framework="pt") as fh:
                assert any("lora_" in k for k in fh.keys())  # noqa: SIM118
        assert latest_checkpoint(info.run_dir) == max(visible)
        assert visible_shelf(home) == ["earlier"]
        torn = any(
            p.name.startswith((".tmp-", ".trash-"))
            for p in (info.run_dir / "checkpoints").iterdir()
        )
        FAULTS.add(
            "sigkill at a random moment", "inside a checkpoint write" if torn else "between writes"
        )
    assert snapshot(earlier) == before


# --- two app processes press Start together ---------------------------------------------------


def test_two_app_processes_starting_at_once_get_one_run_and_one_clear_refusal(
    tiny_llama_dir, home, ui
):
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
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=os.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
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
    message, new_id = ui["on_start"](
        DATA_SOURCES[0], None, "", *forms.form_values(forms.ui_defaults())
    )
    assert (
        message
        == (f"⚠️ Not started: run {run_id} is still running; stop it or wait for it to finish")
        and new_id is None
    )
    assert [r.run_id for r in runner.list_runs()] == [run_id]
    FAULTS.add("two starts at once", "two app processes + the Train tab")
    _kill(runner.get(run_id).status["pid"])
    assert _final(run_id)["state"] == "failed"
