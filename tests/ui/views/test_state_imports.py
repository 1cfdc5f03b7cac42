"""Opening a page starts a model load in a thread while the Train tab previews its dataset in
another; the dataset load must not see transformers half-imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

RACE = """
import sys, threading
{prelude}
from finetune import data

def load_model_classes():
    from transformers import AutoModelForCausalLM, AutoTokenizer  # what a model load imports

thread = threading.Thread(target=load_model_classes)
thread.start()
try:
    print("rows", len(data.load_rows("assets/demo_support.jsonl")))
except ValueError as err:
    print("refused", err)
thread.join()
"""


def _race(prelude: str, tmp_path) -> str:
    env = {"HF_HUB_OFFLINE": "1", "TUNEDESK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", RACE.format(prelude=prelude)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_dataset_load_beside_a_model_load_reads_its_rows_once_the_engine_exists(
    tmp_path, tiny_llama_dir
):
    out = _race(f"from ui.views.state import AppState\nAppState({str(tiny_llama_dir)!r})", tmp_path)
    assert "rows 2484" in out, out
