"""`train(config, on_event=None, stop=None)`: the one training entry point.

The CLI, the supervised child process, the UI and the tests all call this. It runs
setup -> loop -> save, reporting progress through ``on_event(dict)``. The loop is a plain
PyTorch loop rather than the HF Trainer: it lets the LM head run only on label positions,
packs rows without padding, checks ``stop`` between steps, and syncs with the host only
when it reports (docs/benchmarks.md has the measurements that justify it).
"""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from finetune import paths
from finetune.config import RunConfig, validate
from finetune.hardware import detect
from finetune.steps import build_optimizer, build_scheduler, loss_sum, plan_steps, validation_loss


class ConfigError(ValueError):
    """The run settings cannot work here; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid training settings: " + "; ".join(problems))


@dataclass
class TrainResult:
    adapter_dir: Path | None
    status: str  # "done" or "stopped"
    steps: int
    metrics: dict = field(default_factory=dict)


def _emit(on_event, rank: int, kind: str, **data) -> None:
    if on_event is not None and rank == 0:
        on_event({"type": kind, "time": time.time(), **data})


def _peak_memory_gib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _should_stop(stop) -> bool:
    if stop is None:
        return False
    return stop.is_set() if hasattr(stop, "is_set") else bool(stop())


def _autocast(device: str, precision: str):
    if precision == "fp32":
        return None
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return lambda: torch.autocast(kind, dtype=dtype)


def _dist_setup(device: str) -> tuple[int, int, str]:
    """(rank, world_size, device) — DDP when launched under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return rank, world, device


def train(cfg: RunConfig, on_event=None, stop=None) -> TrainResult:
    """Fine-tune a LoRA adapter and save it on the shelf.

    Args:
        cfg: the full run configuration (validated here first; nothing loads if it is bad).
        on_event: called with a dict per event: start, progress, eval, probe, saved, done.
        stop: a ``threading.Event`` or a callable returning True to finish the current step,
            save the adapter and return.

    Returns:
        Where the adapter was saved, whether the run finished or was stopped, and metrics.

    Raises:
        ConfigError: every problem with the settings, before anything is loaded.
    """
    from finetune import data as data_mod
    from finetune.collate import collate, prepare_model_for_packing, supports_packing
    from finetune.loading import apply_lora, load_model, load_tokenizer, set_cpu_threads
    from finetune.models import resolve
    from finetune.probes import answer_probes
    from finetune.saving import (
        check_writable,
        latest_checkpoint,
        load_checkpoint,
        now,
        save_adapter,
        save_checkpoint,
        unique_adapter_name,
        versions,
    )

    hw = detect()
    problems = validate(cfg, hw)
    if problems:
        raise ConfigError(problems)
    t0 = time.time()
    t, lc, dc = cfg.train, cfg.lora, cfg.data
    rank, world, device = _dist_setup(hw.device(t.device).name)
    home = paths.home()
    check_writable(home / "adapters")
    run_dir = Path(cfg.run.run_dir) if cfg.run.run_dir else home / "runs" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    threads = set_cpu_threads(t.cpu_threads) if not device.startswith("cuda") else torch.get_num_threads()
    torch.manual_seed(t.seed)

    # --- setup: model, data, adapter, optimizer -------------------------------------------
    _emit(on_event, rank, "status", message=f"resolving base model {cfg.model.name}")
    resolved = resolve(cfg.model.name)
    tokenizer = load_tokenizer(resolved, cfg.model.trust_remote_code)
    _emit(on_event, rank, "status", message="loading and tokenizing the dataset")
    prepared = data_mod.prepare(dc, tokenizer)
    train_rows, val_rows = list(prepared.train), list(prepared.val)
    _emit(on_event, rank, "status", message=f"loading {resolved.name} on {device} ({t.precision}, quantization {t.quantization})")
    model = load_model(resolved, device, t.precision, t.quantization, cfg.model.trust_remote_code)
    model.config.use_cache = False
    model = apply_lora(model, resolved.architecture, lc, t.quantization, t.gradient_checkpointing)
    targets = sorted(next(iter(model.peft_config.values())).target_modules)
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    lengths = [len(r["input_ids"]) for r in train_rows]
    packing = dc.packing and supports_packing(resolved.architecture)
    if packing:
        prepare_model_for_packing(model)
    plan = plan_steps(lengths, t.batch_size, t.grad_accum, t.epochs, t.max_steps, t.seed,
                      group_by_length=not packing, world_size=world, rank=rank)
    total = len(plan)
    scheduler = build_scheduler(optimizer, t.lr_schedule, t.warmup_ratio, total)
    start_step = 0
    if cfg.run.resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        start_step = load_checkpoint(ckpt, model, optimizer, scheduler)
        _emit(on_event, rank, "status", message=f"resumed from {ckpt.name} (step {start_step})")
    train_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(model, device_ids=[int(device.split(":")[1])] if device.startswith("cuda") else None)
    pad_id = tokenizer.pad_token_id

    def to_batch(indices, rows=train_rows):
        """Collate on the CPU; count label and real tokens there (no device sync later)."""
        batch = collate([rows[i] for i in indices], pad_token_id=pad_id, packing=packing)
        n_label = int(batch["labels"][:, 1:].ne(-100).sum())
        n_real = int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
        on_device = {k: v.to(device, non_blocking=True) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        return on_device, n_label, n_real

    val_batches = [to_batch(list(range(i, min(i + t.batch_size, len(val_rows)))), val_rows)[0]
                   for i in range(0, len(val_rows), t.batch_size)]
    autocast = _autocast(device, t.precision)
    scaler = torch.amp.GradScaler("cuda") if t.precision == "fp16" and device.startswith("cuda") else None
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    _emit(on_event, rank, "start", total_steps=total, start_step=start_step, train_rows=len(train_rows),
          val_rows=len(val_rows), device=device, threads=threads, packing=packing, targets=targets,
          trainable_params=trainable, run_dir=str(run_dir), data_stats=prepared.stats)

    metrics: dict = {}
    if val_batches and start_step == 0:
        base_loss = validation_loss(model, val_batches, autocast)
        metrics.update(base_val_loss=base_loss, base_val_perplexity=math.exp(base_loss))
        _emit(on_event, rank, "eval", step=0, val_loss=base_loss, val_perplexity=math.exp(base_loss))

    # --- loop -----------------------------------------------------------------------------
    model.train()
    split = 1  # >1 after a CUDA out-of-memory: micro-batches are split, accumulation grows
    oom_events = []
    loop_t0, tokens_seen, loss_acc, loss_tokens = time.time(), 0, torch.zeros((), device=device), 0
    step, status, last_log = start_step, "done", {}
    while step < total:
        if _should_stop(stop):
            status = "stopped"
            break
        micro = [m[j::split] for m in plan.steps[step] for j in range(split) if m[j::split]]
        batches = [to_batch(m) for m in micro]
        # Mean over this step's label tokens; under DDP the gradients are then averaged over ranks.
        n_label = sum(nl for _, nl, _ in batches)
        try:
            for b, _, n_real in batches:
                with autocast() if autocast else _nullctx():
                    s, _ = loss_sum(train_model, b)
                loss = s / max(n_label, 1)
                (scaler.scale(loss) if scaler else loss).backward()
                loss_acc += s.detach()
                tokens_seen += n_real
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            if split >= 64:
                raise
            split *= 2
            oom_events.append({"step": step, "micro_batch": max(1, t.batch_size // split)})
            _emit(on_event, rank, "status", message=f"CUDA out of memory: micro-batch now {max(1, t.batch_size // split)}, accumulation x{split}")
            continue
        loss_tokens += n_label
        if scaler:
            scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm) if t.max_grad_norm > 0 else torch.zeros(())
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % t.log_every == 0 or step == total:
            elapsed = time.time() - loop_t0
            done = step - start_step
            last_log = dict(step=step, total_steps=total, epoch=step / plan.steps_per_epoch,
                            loss=float(loss_acc) / max(loss_tokens, 1), lr=scheduler.get_last_lr()[0],
                            grad_norm=float(grad_norm), tokens_per_second=tokens_seen * world / max(elapsed, 1e-9),
                            elapsed=time.time() - t0, eta=elapsed / done * (total - step),
                            peak_memory_gib=_peak_memory_gib(device))
            _emit(on_event, rank, "progress", **last_log)
            metrics["train_loss"] = last_log["loss"]
            loss_acc.zero_()
            loss_tokens = 0
        if val_batches and t.eval_every and step % t.eval_every == 0 and step < total:
            vl = validation_loss(model, val_batches, autocast)
            _emit(on_event, rank, "eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
        if rank == 0 and t.probe_every and step % t.probe_every == 0 and step < total:
            _emit(on_event, rank, "probe", step=step, answers=answer_probes(model, tokenizer, dc.system_prompt))
        if rank == 0 and t.save_every and step % t.save_every == 0 and step < total:
            save_checkpoint(run_dir, step, model, optimizer, scheduler)
            _emit(on_event, rank, "checkpoint", step=step)

    # --- finish: final eval, probes, save ---------------------------------------------------
    train_seconds = time.time() - loop_t0
    if val_batches:
        vl = validation_loss(model, val_batches, autocast)
        metrics.update(val_loss=vl, val_perplexity=math.exp(vl))
        _emit(on_event, rank, "eval", step=step, val_loss=vl, val_perplexity=math.exp(vl))
    adapter_dir = None
    if rank == 0:
        probes = answer_probes(model, tokenizer, dc.system_prompt)
        _emit(on_event, rank, "probe", step=step, answers=probes)
        name = cfg.run.adapter_name or unique_adapter_name(f"{Path(dc.path).stem}-{time.strftime('%Y%m%d-%H%M')}")
        if (paths.subdir("adapters") / name).exists():
            name = unique_adapter_name(name)
        manifest = {
            "created": now(), "status": status, "steps": step, "total_steps": total,
            "base_model": {**resolved.to_dict()},
            "tokenizer_hash": _tokenizer_hash(resolved.path), "chat_template_hash": _template_hash(tokenizer),
            "lora": {"r": lc.r, "alpha": lc.alpha, "dropout": lc.dropout, "target_modules": targets},
            "training": {**cfg.train.__dict__, "device": device, "packing": packing, "world_size": world,
                         "oom_retries": oom_events, "effective_micro_batch": max(1, t.batch_size // split)},
            "data": {"path": dc.path, "fingerprint": prepared.fingerprint, "train_rows": len(train_rows),
                     "val_rows": len(val_rows), "max_length": dc.max_length, "system_prompt": dc.system_prompt,
                     "mapping": _mapping_dict(prepared.mapping)},
            "metrics": metrics, "probes": probes,
            "timings": {"train_seconds": train_seconds, "total_seconds": time.time() - t0,
                        "tokens_per_second": tokens_seen * world / max(train_seconds, 1e-9)},
            "versions": versions(), "run_dir": str(run_dir),
        }
        adapter_dir = save_adapter(model, tokenizer, name, manifest)
        _emit(on_event, rank, "saved", adapter=name, path=str(adapter_dir))
    _emit(on_event, rank, "done", status=status, step=step, metrics=metrics,
          adapter=adapter_dir.name if adapter_dir else None)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return TrainResult(adapter_dir=adapter_dir, status=status, steps=step, metrics=metrics)


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _tokenizer_hash(folder: Path) -> str:
    from finetune.saving import file_hash

    f = folder / "tokenizer.json"
    return file_hash(f) if f.is_file() else ""


def _template_hash(tokenizer) -> str:
    from finetune.saving import text_hash

    return text_hash(getattr(tokenizer, "chat_template", None))


def _mapping_dict(mapping) -> dict:
    from dataclasses import asdict, is_dataclass

    return asdict(mapping) if is_dataclass(mapping) else dict(mapping or {})
