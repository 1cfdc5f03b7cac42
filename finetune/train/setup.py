"""Setting up a training run, shared by ``train()`` and the dry run (``finetune.train.dryrun``).

Checks first (settings, writable folders), then the process group under torchrun, then the
base model's tokenizer and data, then the model with a fresh LoRA adapter, then batches. Each
helper returns plain objects, so the dry run measures a step with exactly what training uses.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from core import paths
from core.hardware import detect
from finetune.config import RunConfig, validate


class ConfigError(ValueError):
    """The run settings cannot work here; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid training settings: " + "; ".join(problems))


def dist_setup(device: str) -> tuple[int, int, str]:
    """(rank, world_size, device) — DDP when launched under torchrun."""
    from core.gpu import use_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        use_device(device)  # cuda:N with N > 0: libraries that use "the current GPU" follow
        return 0, 1, device
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local}"
        use_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return rank, world, device


def cpu_threads(requested: int, device: str) -> int:
    """Torch threads: on CPU the cores are shared by the processes of this node (DDP)."""
    from finetune.train.model_loading import set_cpu_threads

    if device.startswith("cuda"):
        return torch.get_num_threads()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return set_cpu_threads(requested or max(1, len(os.sched_getaffinity(0)) // local_world))


def check_config(cfg: RunConfig):
    """Validate ``cfg`` against this machine; returns the detected ``Hardware``.

    Raises:
        ConfigError: every problem at once, before anything is loaded.
    """
    hw = detect()
    problems = validate(cfg, hw)
    if problems:
        raise ConfigError(problems)
    return hw


def load_data(cfg: RunConfig, emit=None):
    """Resolve the base model, load its tokenizer and tokenize the dataset.

    Returns:
        ``(resolved, tokenizer, prepared)``: a ``ResolvedModel``, the tokenizer and
        ``finetune.data.PreparedData``.
    """
    from core.models import resolve
    from finetune import data as data_mod
    from finetune.train.model_loading import load_tokenizer

    emit = emit or (lambda *a, **k: None)
    emit("status", message=f"resolving base model {cfg.model.name}")
    resolved = resolve(cfg.model.name)
    tokenizer = load_tokenizer(resolved, cfg.model.trust_remote_code)
    emit("status", message="loading and tokenizing the dataset")
    prepared = data_mod.prepare(cfg.data, tokenizer)
    auto = (prepared.stats.get("passages") or {}).get("auto")
    if auto:  # with_passages "auto": say what the measurement chose
        emit("status", message=auto["line"])
    return resolved, tokenizer, prepared


def load_lora_model(
    cfg: RunConfig, resolved, device: str, lean_ops: bool = True, lean_layers: bool = True
):
    """Load the base on ``device`` as training uses it and put a fresh LoRA adapter on it.

    Args:
        lean_ops: route SwiGLU MLPs through ``finetune.train.fused.silu_mul`` (saves activation
            memory) and, on the CPU, each LoRA layer through ``finetune.train.lean_lora`` (one
            autograd function per layer, cheap dropout masks); the benchmark's seed recipe
            turns it off to stay the seeds' model.
        lean_layers: with ``lean_ops``, the CPU's hand-written layer ops too (lean LoRA and
            dropout, short-row attention); off where the decoder layers are compiled
            (``finetune.train.compiled``): the compiler fuses the plain ops itself, and the
            lean ones, keyed by each layer's weights, would recompile for every layer.

    Returns:
        ``(model, target_module_names, packing)``.
    """
    from finetune.data.collate import prepare_model_for_packing, supports_packing
    from finetune.train.model_loading import apply_lora, load_model

    t = cfg.train
    model = load_model(resolved, device, t.precision, t.quantization, cfg.model.trust_remote_code)
    model.config.use_cache = False
    model = apply_lora(
        model, resolved.architecture, cfg.lora, t.quantization, t.gradient_checkpointing
    )
    if lean_ops:
        from finetune.train.fused import use_lean_ops

        use_lean_ops(model, layers=lean_layers)
    targets = sorted(next(iter(model.peft_config.values())).target_modules)
    packing = cfg.data.packing and supports_packing(resolved.architecture)
    if packing:
        prepare_model_for_packing(model)
    return model, targets, packing


def to_batch(rows, indices, pad_id: int, packing: bool, device: str):
    """Collate on the CPU; count label and real tokens there (no device sync later).

    Returns:
        ``(tensors_on_device, n_label_tokens, n_real_tokens)``.
    """
    from finetune.data.collate import collate

    batch = collate([rows[i] for i in indices], pad_token_id=pad_id, packing=packing)
    n_label = int(batch["labels"][:, 1:].ne(-100).sum())
    n_real = (
        int(batch["attention_mask"].sum())
        if "attention_mask" in batch
        else batch["input_ids"].numel()
    )
    on_device = {
        k: v.to(device, non_blocking=True) for k, v in batch.items() if isinstance(v, torch.Tensor)
    }
    return on_device, n_label, n_real


def run_dir_for(cfg: RunConfig, rank: int) -> Path:
    """Check the shelf and the run folder take writes, then create the run folder (rank 0)."""
    from finetune.train.saving import check_writable

    home = paths.home()
    check_writable(home / "adapters")
    run_dir = (
        Path(cfg.run.run_dir) if cfg.run.run_dir else home / "runs" / time.strftime("%Y%m%d-%H%M%S")
    )
    check_writable(run_dir.parent)  # checkpoints go there; a full disk must not kill the run later
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir
