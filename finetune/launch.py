"""Checks for how a run is launched: processes, machines, rendezvous and sharding. No torch.

``finetune.config.validate`` includes these; ``python -m finetune train`` runs them alone before
it re-launches itself under torchrun, so a bad endpoint is said before any process waits for
peers that will never come.
"""

from __future__ import annotations

SHARDINGS = ("ddp", "fsdp")


def launch_problems(run, train, hardware=None) -> list[str]:
    """Every problem with ``run`` (a ``RunArgs``) given ``train`` (a ``TrainArgs``).

    Args:
        hardware: a ``core.hardware.Hardware``; when given, processes per node are checked
            against the GPUs this machine has.
    """
    out: list[str] = []
    _range(out, "processes per node", run.nproc_per_node, 1, 64)
    out += _node_problems(run)
    out += _sharding_problems(run, train)
    if hardware is not None and isinstance(train.device, str):
        out += _gpu_count_problems(train.device, run.nproc_per_node, hardware)
    return out


def _range(out: list, label: str, value, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        out.append(f"{label} must be a whole number between {lo} and {hi} (got {value!r})")


def _node_problems(r) -> list[str]:
    out: list[str] = []
    _range(out, "nodes", r.nnodes, 1, 1024)
    if out:
        return out
    _range(out, "node rank", r.node_rank, 0, r.nnodes - 1)
    if r.nnodes > 1 and isinstance(r.rdzv_endpoint, str):
        host, _, port = r.rdzv_endpoint.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            out.append(
                f"with {r.nnodes} nodes the rendezvous endpoint must be host:port of node 0 "
                f"(got {r.rdzv_endpoint!r})"
            )
    return out


def _sharding_problems(r, t) -> list[str]:
    """FSDP (torch's FSDP2, ``finetune/train/parallel.py``) and what it is not combined with."""
    if r.sharding not in SHARDINGS:
        return [f"sharding must be ddp or fsdp (got {r.sharding!r})"]
    if r.sharding != "fsdp":
        return []
    out = []
    procs = (
        r.nproc_per_node * r.nnodes
        if all(type(v) is int for v in (r.nproc_per_node, r.nnodes))
        else None
    )
    if procs == 1:
        out.append(
            "sharding fsdp splits the model across processes: set processes per node x nodes "
            "above 1 (1 process holds the whole model; use ddp)"
        )
    if t.quantization in ("8bit", "4bit"):
        # Checked on CPU in fp32: a 4-bit model's forward under FSDP2 (2 gloo ranks) gave the
        # unsharded loss (bitsandbytes restores the quant state from the module). Not offered:
        # on a GPU in bf16 the MixedPrecisionPolicy would cast the packed uint8 weights to bf16
        # for the all-gather, and no training step, 8-bit run or GPU run has been tried.
        out.append(
            f"sharding fsdp is not offered with {t.quantization} quantization (its bf16 all-gather "
            "would cast bitsandbytes' packed weights; untested): use quantization none, or ddp"
        )
    if t.precision == "fp16":
        # fp16 needs a gradient scaler whose overflow check agrees across ranks; not wired for FSDP.
        out.append(
            "sharding fsdp trains in bf16 or fp32, not fp16 (its gradient scaler would have "
            "to agree across ranks): choose bf16 or fp32, or ddp"
        )
    if t.optimizer == "paged_adamw_8bit":
        out.append(
            "sharding fsdp needs the adamw optimizer (bitsandbytes' paged 8-bit AdamW does not "
            "take sharded parameters)"
        )
    return out


def _gpu_count_problems(device: str, procs, hardware) -> list[str]:
    """Under DDP or FSDP each process takes its own GPU (``cuda:LOCAL_RANK``): extra ranks would
    die with "invalid device ordinal" after the first ones had loaded the model."""
    gpus = sum(d.name.startswith("cuda") for d in hardware.devices)
    on_gpu = device.startswith("cuda") or (device == "auto" and gpus > 0)
    if on_gpu and isinstance(procs, int) and procs > gpus > 0:  # none: the device check says
        return [
            f"{procs} processes per node need {procs} GPUs; this machine has {gpus}: "
            f"set processes per node to {gpus} or fewer"
        ]
    return []
