"""Helpers that tests import by name (``from run_helpers import tiny_run_config``).

Not in conftest.py: test folders may have their own conftest.py (tests/adapters/export/ does),
and Python knows only one module named ``conftest``, so ``from conftest import ...`` would
reach whichever was loaded last.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_run_config(model_dir, **train_overrides):
    """A RunConfig that trains ``model_dir`` for 3 small steps on 48 demo rows."""
    from finetune.config import RunConfig

    cfg = RunConfig()
    cfg.model.name = str(model_dir)
    cfg.data.path = str(ROOT / "assets" / "demo_support.jsonl")
    cfg.data.max_samples, cfg.data.max_length, cfg.data.val_fraction = 48, 96, 0.1
    cfg.lora.r, cfg.lora.alpha = 4, 8
    t = cfg.train
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        3,
        4,
        1,
        0,
        0,
        0,
    )
    for k, v in train_overrides.items():
        setattr(t, k, v)
    return cfg


def wait_until(predicate, what: str, timeout: float = 240):
    """``predicate()``'s first truthy value, polled every 50 ms; fails naming ``what``."""
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
