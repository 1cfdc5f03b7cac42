"""Several machines: `python -m finetune train --nnodes N --node-rank R
--rdzv-endpoint host:port`."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import tiny_run_config

from finetune.commands.train import torchrun_args
from finetune.config import RunArgs, validate

ROOT = Path(__file__).resolve().parents[3]


def test_node_settings_are_checked_together(tiny_llama_dir):
    cfg = tiny_run_config(tiny_llama_dir)
    cfg.run.nnodes, cfg.run.node_rank, cfg.run.rdzv_endpoint = 2, 2, "node0"
    problems = validate(cfg)
    assert any("node rank must be" in p for p in problems)
    assert any(
        "rendezvous endpoint must be host:port of node 0 (got 'node0')" in p for p in problems
    )
    cfg.run.node_rank, cfg.run.rdzv_endpoint = 1, "10.0.0.5:29500"
    assert not [p for p in validate(cfg) if "node" in p]


def test_torchrun_flags_one_machine_and_several():
    assert torchrun_args(RunArgs(nproc_per_node=2)) == ["--standalone", "--nproc-per-node=2"]
    assert torchrun_args(
        RunArgs(nproc_per_node=4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.5:29500")
    ) == [
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=10.0.0.5",
        "--master-port=29500",
        "--nproc-per-node=4",
    ]


def test_a_bad_endpoint_is_refused_before_waiting_for_peers(tiny_llama_dir, home):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "finetune",
            "train",
            "--model",
            str(tiny_llama_dir),
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            "nohost",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert (
        out.returncode == 2
        and "host:port of node 0" in out.stderr
        and "Traceback" not in out.stderr
    )


@pytest.mark.slow
def test_two_nodes_on_one_machine_train_one_adapter(tiny_llama_dir, home):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events = home / "events.jsonl"
    procs = []
    for node in (0, 1):  # two torchrun launches, as two machines would run them (gloo on the CPU)
        cmd = [
            sys.executable,
            "-m",
            "finetune",
            "train",
            "--nnodes",
            "2",
            "--node-rank",
            str(node),
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--model",
            str(tiny_llama_dir),
            "--data",
            str(ROOT / "assets" / "demo_support.jsonl"),
            "--max-samples",
            "32",
            "--max-length",
            "64",
            "--batch-size",
            "2",
            "--max-steps",
            "2",
            "--lora-r",
            "4",
            "--eval-every",
            "0",
            "--probe-every",
            "0",
            "--save-every",
            "0",
            "--name",
            "two-nodes",
            "--quiet",
        ] + (["--events", str(events)] if node == 0 else [])
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=os.environ,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    manifest = json.loads((home / "adapters" / "two-nodes" / "manifest.json").read_text())
    assert (
        manifest["training"]["world_size"] == 2
        and manifest["steps"] == 2
        and manifest["status"] == "done"
    )
    assert [json.loads(line)["type"] for line in events.read_text().splitlines()].count(
        "saved"
    ) == 1
