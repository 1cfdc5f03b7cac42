"""How the processes of a run share the work: DDP (the default) or FSDP (``run.sharding``).

* DDP: every rank holds the whole model; ``DistributedDataParallel`` only carries the LoRA
  gradients, which ``finetune/train/oom.py`` averages by hand once every rank has finished its
  micro-batches.
* FSDP: torch's FSDP2 (``fully_shard``) on each decoder layer, then on the whole model. Every
  parameter, frozen base and trainable LoRA alike, becomes a ``DTensor`` holding 1/world of
  its rows on each rank; a layer's parameters are all-gathered just before its forward and
  backward and freed after, and gradients are reduce-scattered, so each rank keeps only its
  shard of the weights, the gradients and the AdamW state. It is for bases that do not fit
  one GPU; for SmolLM2-135M it only adds communication.

Why FSDP2 rather than FSDP1 or accelerate: sharding per parameter handles a layer whose frozen
base weights sit beside trainable LoRA weights without flattening them together (FSDP1's
``FlatParameter`` needs ``use_orig_params`` for that), and the model keeps its class and its
parameter names, so PEFT's ``save_pretrained`` and state-dict keys stay as they are.

The lean CPU LoRA layers (``lean_lora.py``) work unchanged: they run inside a decoder layer's
forward, where FSDP2 has swapped the whole (unsharded) weights in. The lean LM head does not
(``fused.lean_head``): it reads the head's weight outside any forward, where it is a shard.

Under FSDP every forward is a collective, so everything that runs the model (validation,
probe answers, gathering the adapter to save it) runs on every rank; only rank 0 writes.
"""

from __future__ import annotations

import torch


def wrap(model, world: int, device: str, sharding: str, precision: str):
    """The model to step: ``model`` itself (one process, or sharded in place) or its DDP wrapper.

    FSDP replaces the parameters with DTensors, so the optimizer must be built after this.
    """
    if world == 1:
        return model
    if sharding == "fsdp":
        shard(model, device, precision)
        return model
    from torch.nn.parallel import DistributedDataParallel

    # No buffer broadcast: it is a collective inside every forward, so a rank that ran out
    # of memory before its forward would leave the others waiting there (finetune/train/oom.py).
    # The model's buffers (rotary tables) are the same on every rank anyway.
    ids = [int(device.split(":")[1])] if device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)


def shard(model, device: str, precision: str) -> None:
    """FSDP2 in place: each decoder layer is one all-gather unit, the root holds the rest
    (embeddings, final norm, the LM head tied to the embeddings)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(
        "cuda" if device.startswith("cuda") else "cpu", (dist.get_world_size(),)
    )
    # On a GPU in bf16 the base is loaded in bf16 and PEFT keeps LoRA in fp32: all-gather and
    # compute in bf16, reduce gradients and keep the sharded LoRA weights in fp32. On the CPU
    # weights stay fp32 and autocast does bf16 (finetune/train/model_loading.py).
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if device.startswith("cuda") and precision == "bf16"
        else MixedPrecisionPolicy()
    )
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def decoder_layers(model) -> list:
    """The repeated blocks transformers says must not be split (``_no_split_modules``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"sharding fsdp: found no decoder layers in {type(base).__name__} "
            "(its _no_split_modules is empty); use sharding ddp"
        )
    return layers


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _full_options(**extra):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **extra)


def full_trainable_state(model) -> dict:
    """The LoRA weights as whole CPU tensors, keyed like ``model.state_dict()``, on rank 0
    (empty on the others). A collective: every rank must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options(ignore_frozen_params=True))


def full_optimizer_state(model, optimizer) -> dict:
    """The optimizer's state with whole tensors on rank 0 (a collective, like the above)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_full_options())


def load_full_state(model, optimizer, model_state: dict, optimizer_state: dict) -> None:
    """Rank 0's whole tensors broadcast and cut into every rank's shards (others pass {})."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = _full_options(broadcast_from_rank0=True, strict=False)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)


def broadcast_object(obj, rank: int):
    """Rank 0's ``obj`` on every rank (small picklable things: a path, a scheduler state)."""
    import torch.distributed as dist

    box = [obj if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]
