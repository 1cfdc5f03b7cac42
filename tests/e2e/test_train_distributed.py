"""Two processes on the CPU: `python -m finetune train --nproc-per-node 2` (torchrun's standalone
launch, gloo). The run is sharded with FSDP, so the one launch also proves the --sharding flag
reaches the workers; DDP from the command line runs in tests/finetune/commands/test_train_nodes.py
(two torchrun launches) and beside FSDP in tests/e2e/test_fsdp.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.events import read_events
from finetune.train.steps import plan_steps

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_processes_train_and_rank_zero_saves_one_adapter(tiny_llama_dir, home):
    run_dir, events = home / "runs" / "fsdp", home / "events.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "finetune",
        "train",
        "--nproc-per-node",
        "2",
        "--sharding",
        "fsdp",
        "--model",
        str(tiny_llama_dir),
        "--data",
        str(ROOT / "assets" / "demo_support.jsonl"),
        "--max-samples",
        "48",
        "--max-length",
        "96",
        "--batch-size",
        "2",
        "--max-steps",
        "3",
        "--lora-r",
        "4",
        "--eval-every",
        "0",
        "--probe-every",
        "0",
        "--save-every",
        "2",
        "--run-dir",
        str(run_dir),
        "--events",
        str(events),
        "--quiet",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    shelf = [p for p in (home / "adapters").iterdir() if not p.name.startswith(".")]
    assert len(shelf) == 1
    manifest = json.loads((shelf[0] / "manifest.json").read_text())
    assert (
        manifest["training"]["world_size"] == 2
        and manifest["steps"] == 3
        and manifest["status"] == "done"
    )
    assert manifest["training"]["sharding"] == "fsdp"
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-0000002"]
    kinds = [e["type"] for e in read_events(events)[0]]  # rank 0 alone reports
    assert kinds.count("start") == 1 and kinds.count("saved") == 1 and kinds[-1] == "done"


def test_every_rank_runs_the_same_micro_batches():
    # 9 rows, 2 ranks x 2 rows: the epoch's last batch has one row, which only rank 0 could
    # take; with grad_accum 2 the ranks would then all-reduce a different number of times.
    plans = [plan_steps([10] * 9, 2, 2, 2.0, 0, 0, world_size=2, rank=r) for r in range(2)]
    shapes = [[[len(m) for m in step] for step in p.steps] for p in plans]
    assert shapes[0] == shapes[1] and len(plans[0]) == len(plans[1])
    for a, b in zip(plans[0].steps, plans[1].steps, strict=True):
        assert not {i for m in a for i in m} & {i for m in b for i in m}  # ranks see different rows
