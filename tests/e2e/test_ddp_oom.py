"""DDP (gloo, two CPU processes) with an out-of-memory error on one rank only: both ranks
split the step together and end with the same weights, instead of hanging or diverging."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
RANK_SCRIPT = """
import json, os, sys
import torch
sys.path.insert(0, {tests!r})
from run_helpers import tiny_run_config
import finetune.train.finish as finishing
import finetune.train.loop as loop
from finetune.train import train

rank, out = int(os.environ["RANK"]), {out!r}
real_fb, real_finish, calls = loop.forward_backward, finishing.finish, []

def forward_backward(model, batches, *args, **kwargs):
    calls.append(len(batches))
    if rank == 1 and len(calls) == 1:  # rank 1 alone runs out of memory, on the first step
        raise torch.OutOfMemoryError("CUDA out of memory (simulated on rank 1)")
    return real_fb(model, batches, *args, **kwargs)

def finish(run, progress):
    lora = {{n: p.detach().clone() for n, p in run.model.named_parameters() if p.requires_grad}}
    torch.save(lora, f"{{out}}/rank{{rank}}.pt")
    with open(f"{{out}}/rank{{rank}}.json", "w") as f:
        json.dump({{"split": progress.split, "oom": progress.oom_events, "calls": calls}}, f)
    return real_finish(run, progress)

loop.forward_backward, finishing.finish = forward_backward, finish
cfg = tiny_run_config({model!r}, max_steps=3, batch_size=4)
cfg.lora.dropout = 0.0
cfg.run.run_dir = f"{{out}}/run"
print(train(cfg).status)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_oom_on_one_rank_splits_the_step_on_every_rank(tiny_llama_dir, home, tmp_path):
    script = RANK_SCRIPT.format(
        tests=str(ROOT / "tests"), out=str(tmp_path), model=str(tiny_llama_dir)
    )
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script],
                cwd=ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # Rank 0 never ran out of memory, yet it split its step too: both ran 2 micro-batches per step.
    assert ranks[0]["oom"] == ranks[1]["oom"] == [{"step": 0, "micro_batch": 2}]
    assert ranks[0]["split"] == ranks[1]["split"] == 2
    assert ranks[0]["calls"] == [1, 2, 2, 2] and ranks[1]["calls"] == [1, 2, 2, 2]
    weights = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert weights[0].keys() == weights[1].keys()
    assert all(
        torch.allclose(weights[0][k], weights[1][k]) for k in weights[0]
    )  # gradients were averaged
    assert any(
        not torch.equal(v, torch.zeros_like(v)) for k, v in weights[0].items() if "lora_B" in k
    )
