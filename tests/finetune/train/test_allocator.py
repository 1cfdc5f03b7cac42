"""Training processes run under tcmalloc where it is installed (finetune/train/allocator.py)."""

from __future__ import annotations

import time

import pytest

from finetune.train import allocator


def test_env_gets_tcmalloc_once_and_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: "/lib/libtcmalloc_minimal.so.4")
    env = allocator.env_with_tcmalloc({"PATH": "/bin", "LD_PRELOAD": "/lib/other.so"})
    assert (
        env["LD_PRELOAD"] == "/lib/libtcmalloc_minimal.so.4:/lib/other.so" and env["PATH"] == "/bin"
    )
    assert allocator.env_with_tcmalloc(env) is None  # already there: no second re-exec
    assert allocator.env_with_tcmalloc({"TUNEDESK_ALLOCATOR": "system"}) is None
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    assert allocator.env_with_tcmalloc({}) is None


@pytest.mark.skipif(
    allocator.find_tcmalloc() is None, reason="libtcmalloc-minimal4 is not installed"
)
def test_a_supervised_training_run_allocates_with_tcmalloc(tiny_llama_dir, home):
    """The runner starts ``python -m finetune train``, which re-executes itself (same pid)
    with tcmalloc preloaded and says so in its start event."""
    from run_helpers import tiny_run_config

    from core.events import read_events
    from finetune.train import runner

    info = runner.start(tiny_run_config(tiny_llama_dir, max_steps=1), run_id="allocator")
    pid = info.status["pid"]
    deadline = time.time() + 240
    while runner.get("allocator").state in runner.ACTIVE and time.time() < deadline:
        time.sleep(0.5)
    events, _ = read_events(info.run_dir / "events.jsonl")
    start = next(e for e in events if e["type"] == "start")
    assert start["malloc"] == "tcmalloc", start
    assert runner.get("allocator").state == "done" and runner.get("allocator").status["pid"] == pid
