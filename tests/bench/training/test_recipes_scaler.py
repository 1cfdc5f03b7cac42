"""The bench's TuneDesk rows step through a gradient scaler where train() would (fp16 on CUDA)."""

from pathlib import Path

import torch

from bench.training.grid import BenchArgs, Point
from bench.training.recipes import measure
from core import gpu

DATA = str(Path(__file__).resolve().parents[3] / "assets" / "demo_support.jsonl")


class CountingScaler(torch.amp.GradScaler):
    updates = 0

    def update(self, new_scale=None):
        CountingScaler.updates += 1
        super().update(new_scale)


def test_tunedesk_rows_use_the_scaler_train_would_use(tiny_llama_dir, home, monkeypatch):
    asked = []
    # On the CPU make_scaler gives None; hand a CPU scaler out instead, as CUDA fp16 would.
    monkeypatch.setattr(
        gpu,
        "make_scaler",
        lambda d, p: asked.append((d, p)) or CountingScaler("cpu", init_scale=2.0**6),
    )
    args = BenchArgs(
        model=str(tiny_llama_dir),
        data=DATA,
        max_length=48,
        max_samples=24,
        max_steps=3,
        warmup_steps=1,
        val_rows=0,
        threads=1,
    )
    row = measure(args, Point("cpu", 2, 1, "fp32", "none", "tunedesk"))
    assert asked == [("cpu", "fp32")] and CountingScaler.updates == 3
    assert row["real_tokens_per_s"] > 0 and torch.isfinite(torch.tensor(row["final_loss"]))
