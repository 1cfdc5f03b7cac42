"""The dry run in a child process, for callers that hold a model of their own (the app).

In the app's process a dry run would leave its CUDA memory cached beside the chat model, its
peak would include the chat model, and it could start while a training run holds the GPU.
A child process starts clean, reports its own peak, and gives everything back when it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from core import paths

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def dry_run_in_child(cfg, timeout: float = 900) -> dict:
    """``finetune.train.dryrun.dry_run(cfg)`` in a fresh ``python -m finetune train --dry-run``.

    Raises:
        RuntimeError: a training run is active (the two would compete for memory), or the
            child failed or ran past ``timeout`` seconds (the message says which).
        ValueError: the settings cannot run here (every problem, in one sentence).
    """
    from finetune.train import runner

    if runner.any_running():
        raise RuntimeError(
            "a training run is active; a dry run beside it would compete for its memory "
            "and measure both: wait for the run to finish or stop it"
        )
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        cfg.save(config)
        cmd = [sys.executable, "-m", "finetune", "train", "--config", str(config), "--dry-run"]
        env = {**os.environ, "TUNEDESK_HOME": str(paths.home())}
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, cwd=_PROJECT_ROOT, env=env
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"the dry run took longer than {timeout:.0f} s and was stopped"
            ) from None
    return parse_report(proc.returncode, proc.stdout, proc.stderr)


def parse_report(code: int, stdout: str, stderr: str) -> dict:
    """The child's JSON report, or its error as one sentence."""
    if code == 2:
        problems = [
            line.strip()[2:] for line in stderr.splitlines() if line.strip().startswith("- ")
        ]
        errors = [
            line[len("error: ") :] for line in stderr.splitlines() if line.startswith("error: ")
        ]
        raise ValueError(
            "; ".join(problems) or (errors[-1] if errors else "the settings cannot run here")
        )
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line == "{"]
    if code != 0 or not starts:
        last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or [
            f"exit code {code}"
        ]
        raise RuntimeError(f"the dry run failed: {last[0]}")
    return json.loads("\n".join(lines[starts[-1] :]))
