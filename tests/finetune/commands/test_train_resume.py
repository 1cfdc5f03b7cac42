"""`python -m finetune train --resume` names the run it continues: without `--run-dir` it is
refused in a sentence before anything loads, and no run folder is made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_resume_without_a_run_folder_is_refused_in_a_sentence(tiny_llama_dir, home):
    out = subprocess.run(
        [sys.executable, "-m", "finetune", "train", "--model", str(tiny_llama_dir), "--resume"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "resume continues a run's folder: name it (--run-dir" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
