"""FSDP (torch's FSDP2) with gloo on two CPU processes: it trains, shards the base, saves a normal
PEFT adapter equal to DDP's, resumes from its own checkpoint; refused combinations say why."""

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_helpers import tiny_run_config
from safetensors.torch import load_file

from finetune.commands.train import add_arguments, build_config
from finetune.config import validate

ROOT = Path(__file__).resolve().parents[2]
# One pair of processes runs four trainings in turn (each sets up and tears down its process
# group): fsdp, ddp with the same seed and data, fsdp resumed from the first one's step-2
# checkpoint, and fsdp with its decoder layers compiled (train.compile "on").
RANK_SCRIPT = """
import json, os, shutil, sys
sys.path.insert(0, {tests!r})
from run_helpers import tiny_run_config
import finetune.train.finish as finishing
import finetune.train.loop as loop
from finetune.train import train

rank, out = int(os.environ["RANK"]), {out!r}
real_finish = finishing.finish

def finish(run, progress):
    if run.sharded:  # one frozen base weight and one LoRA weight, as this rank holds them
        layer = run.model.get_base_model().model.layers[0].mlp.gate_proj
        info = {{name: {{"type": type(w).__name__, "shard_dims": [p.dim for p in w.placements if p.is_shard()],
                         "local": list(w.to_local().shape), "full": list(w.shape)}}
                 for name, w in (("base", layer.base_layer.weight), ("lora_b", layer.lora_B["default"].weight))}}
        with open(f"{{out}}/shard-{{run.cfg.run.adapter_name}}-{{rank}}.json", "w") as f:
            json.dump(info, f)
    return real_finish(run, progress)

finishing.finish = finish

def run(name, sharding, run_dir, resume=False, compile="off"):
    # A fresh port per process group: a rank re-joining on the last one's port could reach
    # the old store before rank 0 has closed it.
    os.environ["MASTER_PORT"] = os.environ["PORTS"].split(",")[["fsdp", "ddp", "resumed", "compiled"].index(name)]
    cfg = tiny_run_config({model!r}, max_steps=3, batch_size=2, grad_accum=2, save_every=2, eval_every=2)
    cfg.run.sharding, cfg.run.nproc_per_node, cfg.run.adapter_name = sharding, 2, name
    cfg.run.run_dir, cfg.run.resume = f"{{out}}/{{run_dir}}", resume
    cfg.lora.dropout, cfg.train.compile = 0.0, compile
    print(name, train(cfg).status, flush=True)

run("fsdp", "fsdp", "run-fsdp")
run("ddp", "ddp", "run-ddp")
if rank == 0:  # a run that stopped after step 2: only its checkpoint is left
    shutil.copytree(f"{{out}}/run-fsdp/checkpoints", f"{{out}}/run-stopped/checkpoints")
run("resumed", "fsdp", "run-stopped", resume=True)
run("compiled", "fsdp", "run-compiled", compile="on")
"""  # noqa: E501


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(script: str, tmp_path: Path) -> list[str]:
    ports = ",".join(str(_free_port()) for _ in range(4))
    procs = []
    for rank in (0, 1):  # what torchrun sets for two local workers
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "PORTS": ports,
            "OMP_NUM_THREADS": "1",
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
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-4000:] for o in outputs)
    return outputs


def _lora(folder: Path) -> dict:
    return load_file(folder / "adapter_model.safetensors")


def test_fsdp_trains_sharded_and_saves_the_adapter_ddp_saves(tiny_llama_dir, home, tmp_path):
    script = RANK_SCRIPT.format(
        tests=str(ROOT / "tests"), out=str(tmp_path), model=str(tiny_llama_dir)
    )
    outputs = _run_ranks(script, tmp_path)
    assert "fsdp done" in outputs[0] and "resumed done" in outputs[1]
    shelf = home / "adapters"
    fsdp, ddp, resumed = _lora(shelf / "fsdp"), _lora(shelf / "ddp"), _lora(shelf / "resumed")
    assert fsdp.keys() == ddp.keys() and len(fsdp) == 2 * 7 * 2  # A and B, 7 targets, 2 layers
    assert all(torch.allclose(fsdp[k], ddp[k], atol=1e-6) for k in fsdp)
    assert any(ddp[k].abs().sum() > 0 for k in ddp if "lora_B" in k)  # it trained
    # Resumed at step 2 with the checkpoint's weights, AdamW moments and schedule: same step 3.
    assert all(torch.allclose(fsdp[k], resumed[k], atol=1e-6) for k in fsdp)
    # Compiled layers under FSDP: the same adapter, within the compiler's rounding.
    compiled = _lora(shelf / "compiled")
    training = json.loads((shelf / "compiled" / "manifest.json").read_text())["training"]
    assert training["compiled"] is True and training["sharding"] == "fsdp", training
    assert all(torch.allclose(fsdp[k], compiled[k], atol=1e-4) for k in fsdp)
    manifest = json.loads((shelf / "fsdp" / "manifest.json").read_text())
    assert manifest["training"]["sharding"] == "fsdp" and manifest["training"]["world_size"] == 2
    ckpt = torch.load(
        tmp_path / "run-fsdp" / "checkpoints" / "step-0000002" / "trainer_state.pt",
        weights_only=False,
    )
    assert ckpt["sharding"] == "fsdp" and all(
        s["exp_avg"].shape for s in ckpt["optimizer"]["state"].values()
    )
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    loaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir), shelf / "fsdp"
    )
    b = loaded.base_model.model.model.layers[1].self_attn.v_proj.lora_B["default"].weight
    assert torch.equal(b, fsdp["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"])
    # Each rank held half of every weight's rows: a (128, 64) gate_proj as (64, 64) DTensor shards.
    for rank in (0, 1):
        shard = json.loads((tmp_path / f"shard-fsdp-{rank}.json").read_text())
        assert shard["base"] == {
            "type": "DTensor",
            "shard_dims": [0],
            "local": [64, 64],
            "full": [128, 64],
        }
        assert shard["lora_b"]["type"] == "DTensor" and shard["lora_b"]["local"] == [64, 4]


def _fsdp_cfg(tiny_llama_dir, **run):
    cfg = tiny_run_config(tiny_llama_dir)
    cfg.run.sharding, cfg.run.nproc_per_node = "fsdp", 2
    for k, v in run.items():
        setattr(cfg.run, k, v)
    return cfg


def test_refused_fsdp_combinations_say_why(tiny_llama_dir):
    assert validate(_fsdp_cfg(tiny_llama_dir)) == []
    one = validate(_fsdp_cfg(tiny_llama_dir, nproc_per_node=1))
    assert one == [
        "sharding fsdp splits the model across processes: set processes per node x nodes above 1 "
        "(1 process holds the whole model; use ddp)"
    ]
    assert (
        validate(
            _fsdp_cfg(tiny_llama_dir, nproc_per_node=1, nnodes=2, rdzv_endpoint="10.0.0.5:29500")
        )
        == []
    )
    cfg = _fsdp_cfg(tiny_llama_dir)
    cfg.train.quantization, cfg.train.precision, cfg.train.optimizer = (
        "4bit",
        "fp16",
        "paged_adamw_8bit",
    )
    problems = " | ".join(validate(cfg))
    assert "not offered with 4bit quantization" in problems and "not fp16" in problems
    assert "needs the adamw optimizer" in problems
    assert validate(_fsdp_cfg(tiny_llama_dir, sharding="zero3")) == [
        "sharding must be ddp or fsdp (got 'zero3')"
    ]


def test_sharding_flag_on_the_command_line(tiny_llama_dir):
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(
        p.parse_args(
            ["--model", str(tiny_llama_dir), "--nproc-per-node", "2", "--sharding", "fsdp"]
        )
    )
    assert cfg.run.sharding == "fsdp" and validate(cfg) == []


def test_an_fsdp_checkpoint_is_not_resumed_as_ddp(tmp_path):
    from finetune.train.saving import load_checkpoint

    ckpt = tmp_path / "step-0000002"
    ckpt.mkdir()
    torch.save({"sharding": "fsdp", "step": 2}, ckpt / "trainer_state.pt")
    with pytest.raises(ValueError, match="written by an fsdp run: resume it with sharding fsdp"):
        load_checkpoint(ckpt, None, None, None)
