"""The supervised runner with real child processes on the tiny llama model.

Each test starts real ``python -m finetune train`` children (the ``home`` fixture's
TUNEDESK_HOME is inherited), so they are the slow part of the suite: the scenarios are
grouped to start as few children as possible.
"""

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from run_helpers import tiny_run_config
from run_helpers import wait_until as _wait

from core.events import read_events
from finetune.train import priority, runner
from finetune.train.saving import latest_checkpoint

ROOT = Path(__file__).resolve().parents[3]


_cfg = tiny_run_config


def _events(run_dir: Path) -> list[dict]:
    return read_events(run_dir / "events.jsonl")[0]


def _wait_event(run_dir: Path, kind: str) -> dict:
    def seen():
        event = next((e for e in _events(run_dir) if e["type"] == kind), None)
        if event is None and runner.refresh(run_dir)["state"] not in runner.ACTIVE:
            raise AssertionError(f"run ended before a {kind!r} event: {runner.refresh(run_dir)}")
        return event

    return _wait(seen, f"a {kind!r} event")


def _wait_final(run_id: str) -> dict:
    return _wait(
        lambda: (s := runner.get(run_id).status)["state"] not in runner.ACTIVE and s,
        f"{run_id} to end",
    )


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have finished on its own already
        os.kill(pid, 9)


def _shelf(home: Path) -> list[str]:
    """Adapter folders on the shelf; each must be whole (hidden .tmp-* folders are ignored)."""
    names = []
    for d in sorted((home / "adapters").iterdir()):
        if d.name.startswith("."):
            continue
        assert (d / "manifest.json").is_file() and (d / "adapter_model.safetensors").is_file(), (
            f"partial {d}"
        )
        names.append(d.name)
    return names


def _hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _python(code: str) -> str:
    """Run ``code`` in a new Python process (another app) and return its last stdout line."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


_VIEW = (
    "import json; from finetune.train import runner; print(json.dumps({r.run_id: r.state for "
    "r in runner.list_runs()}))"
)


def test_one_run_at_a_time_and_an_app_restart_reattaches(tiny_llama_dir, home):
    # The "app" starting the run is a separate process that presses Start twice at once and
    # exits: whatever this test sees afterwards comes from the run files alone.
    started = json.loads(
        _python(f"""
        import json, threading
        from finetune.train import priority, runner
        from finetune.config import RunConfig
        cfg = RunConfig.from_dict({_cfg(tiny_llama_dir).to_dict()!r})
        barrier, out = threading.Barrier(2), {{"ok": [], "refused": []}}
        def press(i):
            barrier.wait()
            try:
                out["ok"].append(runner.start(RunConfig.from_dict(cfg.to_dict()), run_id=f"race-{{i}}").run_id)
            except RuntimeError as err:
                out["refused"].append(str(err))
        threads = [threading.Thread(target=press, args=(i,)) for i in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(json.dumps(out))
    """)  # noqa: E501
    )
    assert len(started["ok"]) == 1 and len(started["refused"]) == 1, started
    run_id = started["ok"][0]
    assert f"run {run_id} is still" in started["refused"][0]
    assert [(r.run_id, r.state) for r in runner.list_runs()] == [(run_id, "running")]
    with pytest.raises(RuntimeError, match=f"run {run_id} is still running; stop it or wait"):
        runner.start(_cfg(tiny_llama_dir), run_id="second")
    assert json.loads(_python(_VIEW)) == {run_id: "running"}

    final = _wait_final(run_id)
    assert final["state"] == "done" and final["reason"] == "finished", final
    kinds = [e["type"] for e in _events(home / "runs" / run_id)]
    assert (
        kinds[0] == "status"
        and {"start", "progress", "saved"} <= set(kinds)
        and kinds[-1] == "done"
    )
    assert _shelf(home) == [final["adapter"]]
    assert json.loads(_python(_VIEW)) == {run_id: "done"}


def test_stop_saves_the_adapter_at_the_current_step(tiny_llama_dir, home, monkeypatch):
    monkeypatch.delenv("TUNEDESK_TRAIN_NICE", raising=False)
    info = runner.start(_cfg(tiny_llama_dir, max_steps=400), run_id="long")
    assert info.state == "running"
    first = _wait_event(info.run_dir, "progress")
    # the training child yields the cores to serving (finetune/train/priority.py)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, info.status["pid"]) == max(own, 10)
    if priority.session_niceness() is not None:  # and its session's group, beside the app's
        group = Path(f"/proc/{info.status['pid']}/autogroup").read_text()
        assert group.split()[-1] == "10", group
    assert runner.stop("long")["state"] == "stopping"
    final = _wait_final("long")
    assert final["state"] == "stopped" and final["exit_code"] == 0, final
    manifest = json.loads((home / "adapters" / final["adapter"] / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and first["step"] <= manifest["steps"] < 400
    done = _events(info.run_dir)[-1]
    assert (
        done["type"] == "done" and done["status"] == "stopped" and done["step"] == manifest["steps"]
    )
    assert _shelf(home) == [final["adapter"]]


def test_stop_while_the_run_is_still_loading_ends_it_with_nothing_to_save(tiny_llama_dir, home):
    # Stop pressed right after Start: the child is still starting up (imports, the model).
    info = runner.start(_cfg(tiny_llama_dir, max_steps=400), run_id="early-stop")
    assert runner.stop("early-stop")["state"] == "stopping"
    final = _wait_final("early-stop")
    assert final["state"] == "stopped", final
    assert final["reason"] == "stopped before training began: nothing to save", final
    assert "adapter" not in final
    assert not any(e["type"] == "progress" for e in _events(info.run_dir))
    assert not (home / "adapters").exists() or _shelf(home) == []
    assert {r.run_id: r.state for r in runner.list_runs()} == {"early-stop": "stopped"}

    # Stop once the child has its handler and is importing torch (loading): it answers itself.
    info = runner.start(_cfg(tiny_llama_dir, max_steps=400), run_id="loading-stop")
    maps = Path(f"/proc/{info.status['pid']}/maps")
    _wait(lambda: "libtorch" in maps.read_text(), "the child to load torch")
    runner.stop("loading-stop")
    final = _wait_final("loading-stop")
    assert final["state"] == "stopped" and final["exit_code"] == 0, final
    assert final["reason"] == "stopped before training began: nothing to save", final
    done = _events(info.run_dir)[-1]
    assert done["type"] == "done" and done["adapter"] is None and done["step"] == 0, done
    assert not any(e["type"] == "progress" for e in _events(info.run_dir))
    assert not (home / "adapters").exists() or _shelf(home) == []


def test_sigkill_at_any_point_leaves_the_shelf_whole_and_is_reported(tiny_llama_dir, home):
    # After "saved": the adapter is complete, so the run is done however it ended.
    info = runner.start(_cfg(tiny_llama_dir, max_steps=2), run_id="kill-after-save")
    _wait_event(info.run_dir, "saved")
    _kill(info.status["pid"])
    final = _wait_final("kill-after-save")
    assert final["state"] == "done" and _shelf(home) == [final["adapter"]], final
    earlier = home / "adapters" / final["adapter"]
    before = _hashes(earlier)

    # During training, before the first checkpoint.
    info = runner.start(_cfg(tiny_llama_dir, max_steps=400, save_every=100), run_id="kill-early")
    _wait_event(info.run_dir, "progress")
    _kill(info.status["pid"])
    final = _wait_final("kill-early")
    assert final["state"] == "failed" and final["reason"] == "killed by signal 9", final
    assert "adapter" not in final and final["log_tail"]
    assert latest_checkpoint(info.run_dir) is None

    # Right after a checkpoint (the next one is being written every step).
    info = runner.start(
        _cfg(tiny_llama_dir, max_steps=400, save_every=1), run_id="kill-after-checkpoint"
    )
    checkpoint = _wait_event(info.run_dir, "checkpoint")
    _kill(info.status["pid"])
    final = _wait_final("kill-after-checkpoint")
    assert final["state"] == "failed" and final["reason"] == "killed by signal 9", final
    ckpt = latest_checkpoint(info.run_dir)
    assert ckpt is not None and int(ckpt.name.split("-")[1]) >= checkpoint["step"]
    assert (ckpt / "adapter_model.safetensors").is_file()

    assert _shelf(home) == [earlier.name] and _hashes(earlier) == before
    states = {r.run_id: r.state for r in runner.list_runs()}
    assert states == {
        "kill-after-save": "done",
        "kill-early": "failed",
        "kill-after-checkpoint": "failed",
    }
