"""train() under faults: CUDA out of memory, a full disk, settings too big for the device."""

import collections
import dataclasses
import json
import re
import subprocess

import pytest
import torch
from run_helpers import tiny_run_config

import finetune.train.loop as loop_mod
from core import hardware
from finetune.train import train

_cfg = tiny_run_config


def _examples(batch: dict) -> int:
    """Rows in a micro-batch: packed rows restart their position ids at 0."""
    if "position_ids" in batch:
        return int((batch["position_ids"] == 0).sum())
    return batch["input_ids"].shape[0]


def test_cuda_oom_splits_micro_batches_and_keeps_the_effective_batch(
    tiny_llama_dir, home, monkeypatch
):
    # The step's forward/backward fails (validation batches go through unharmed).
    real, calls, raised = loop_mod.forward_backward, [], []

    def forward_backward(model, batches, *args, **kwargs):
        sizes = [_examples(b) for b, _, _ in batches]
        if max(sizes) > 2 and not raised:
            raised.append(max(sizes))
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        calls.extend(sizes)
        return real(model, batches, *args, **kwargs)

    monkeypatch.setattr(loop_mod, "forward_backward", forward_backward)
    events = []
    result = train(
        _cfg(tiny_llama_dir, max_steps=3, batch_size=4, grad_accum=1), on_event=events.append
    )
    assert result.status == "done" and result.steps == 3 and raised == [4]
    training = json.loads((result.adapter_dir / "manifest.json").read_text())["training"]
    assert training["oom_retries"] == [{"step": 0, "micro_batch": 2}]
    assert training["effective_micro_batch"] == 2 and training["batch_size"] == 4
    # Every optimizer step still sees 4 rows, now as two micro-batches of 2.
    assert calls == [2] * 6
    assert any("micro-batch now 2" in e.get("message", "") for e in events if e["type"] == "status")
    losses = [e["loss"] for e in events if e["type"] == "progress"]
    assert len(losses) == 3 and all(0 < x < 10 for x in losses)  # the failed attempt is not counted


@pytest.fixture
def tiny_tmpfs(home):
    """``home/adapters`` on a 64 KiB tmpfs (a full disk); skipped where mounting is not allowed."""
    shelf = home / "adapters"
    shelf.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(shelf)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield shelf
    subprocess.run(["umount", str(shelf)], check=True)


@pytest.mark.parametrize("filled", [False, True])
def test_full_disk_fails_early_naming_the_folder(tiny_llama_dir, home, tiny_tmpfs, filled):
    if filled:  # no room for even one block: the write itself fails
        with open(tiny_tmpfs / "filler", "wb") as f, pytest.raises(OSError):
            f.write(b"x" * 2**20)
    expected = "cannot write to" if filled else "MiB free under"
    with pytest.raises(OSError, match=f"{expected} {re.escape(str(tiny_tmpfs))}"):
        train(_cfg(tiny_llama_dir))
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == (["filler"] if filled else [])
    assert not list((home / "runs").iterdir())


def test_low_disk_space_is_refused_before_loading(tiny_llama_dir, home, monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(
        "finetune.train.saving.shutil.disk_usage", lambda _: usage(2**30, 2**30 - 2**20, 2**20)
    )
    with pytest.raises(OSError, match=re.escape(f"only 1 MiB free under {home / 'adapters'}")):
        train(_cfg(tiny_llama_dir))
    assert not [p for p in (home / "adapters").iterdir()] and not list((home / "runs").iterdir())


class _Warned(Exception):
    pass


def test_settings_too_big_for_the_device_warn_before_the_model_loads(
    tiny_llama_dir, home, monkeypatch
):
    hw = hardware.detect()
    small = dataclasses.replace(
        hw, devices=[dataclasses.replace(d, memory_gib=0.01) for d in hw.devices]
    )
    monkeypatch.setattr(hardware, "detect", lambda: small)
    seen = []

    def on_event(event):
        seen.append(event)
        if event["type"] == "warning":
            raise _Warned  # stop here: the point is that it comes before loading the model

    with pytest.raises(_Warned):
        train(_cfg(tiny_llama_dir), on_event=on_event)
    warning = seen[-1]
    assert "GiB" in warning["message"] and "lower the batch size" in warning["message"]
    assert warning["estimate"]["fits"] is False
    before = [e["message"] for e in seen[:-1]]
    assert before == [
        f"resolving base model {tiny_llama_dir}",
        "loading and tokenizing the dataset",
    ]
