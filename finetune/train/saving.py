"""Writing results: the adapter folder on the shelf (atomic) and training checkpoints.

An adapter folder is a standard PEFT adapter plus ``manifest.json`` and a model card. It is
written into a hidden temp folder and renamed into place, so a crash or SIGKILL never leaves
a half adapter on the shelf.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path

import torch

from adapters.shelf.manifest import FORMAT as MANIFEST_FORMAT
from core import paths
from core.hashing import file_hash, text_hash  # noqa: F401  (text_hash re-exported)
from core.paths import check_writable  # noqa: F401  (re-exported)


def versions() -> dict:
    import peft
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }


def unique_adapter_name(base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... when the name is taken on the shelf."""
    shelf = paths.subdir("adapters")
    name, i = base, 2
    while (shelf / name).exists():
        name, i = f"{base}-{i}", i + 1
    return name


def adapter_name_for(requested: str, data_path: str) -> str:
    """The requested name, or ``<dataset>-<date>``; made unique when the shelf has it."""
    name = requested or unique_adapter_name(
        f"{Path(data_path).stem}-{time.strftime('%Y%m%d-%H%M')}"
    )
    return unique_adapter_name(name) if (paths.subdir("adapters") / name).exists() else name


def build_manifest(
    cfg,
    resolved,
    tokenizer,
    prepared,
    *,
    status: str,
    steps: int,
    total_steps: int,
    targets: list[str],
    training: dict,
    metrics: dict,
    probes: list,
    timings: dict,
    run_dir: Path,
    budget: dict | None = None,
    knowledge: dict | None = None,
) -> dict:
    """Everything needed to reproduce and judge the adapter (``manifest.json``).

    Args:
        training: run facts beyond ``cfg.train`` (device, packing, world_size, oom_retries...).
        budget: what a time budget bought (seconds, seconds_used, steps, rows_seen,
            tokens_seen, epochs); kept only for a budget run.
        knowledge: the knowledge version the adapter was trained beside (its training split's
            past answers: name, version, fingerprint, passages); None: none was made.
    """
    lc, dc = cfg.lora, cfg.data
    mapping = prepared.mapping
    return {
        "created": now(),
        "status": status,
        "steps": steps,
        "total_steps": total_steps,
        "base_model": resolved.to_dict(),
        "tokenizer_hash": _folder_tokenizer_hash(resolved.path),
        "chat_template_hash": text_hash(getattr(tokenizer, "chat_template", None)),
        "lora": {
            "r": lc.r,
            "alpha": lc.alpha,
            "dropout": lc.dropout,
            "target_modules": targets,
            "top_layers": lc.top_layers,
        },
        "training": {**asdict(cfg.train), **training},
        "data": {
            "path": dc.path,
            "fingerprint": prepared.fingerprint,
            "train_rows": len(prepared.train),
            "val_rows": len(prepared.val),
            "max_length": dc.max_length,
            "system_prompt": dc.system_prompt,
            # The full split settings, so evaluation can rebuild exactly the held-out rows.
            "seed": dc.seed,
            "val_fraction": dc.val_fraction,
            "max_samples": dc.max_samples,
            "truncation": dc.truncation,
            "prompt_column": dc.prompt_column,
            "response_column": dc.response_column,
            "messages_column": dc.messages_column,
            "mapping": asdict(mapping) if is_dataclass(mapping) else dict(mapping or {}),
            # Rows trained with their best past answers in the system message (0: none); the
            # knowledge version they came from is the manifest's "knowledge".
            "with_passages": getattr(dc, "with_passages", 0),
            "passage_share": getattr(dc, "passage_share", 1.0),
            **(
                {"passages": prepared.stats["passages"]}
                if "passages" in (getattr(prepared, "stats", None) or {})
                else {}
            ),
        },
        "metrics": metrics,
        "probes": probes,
        "timings": timings,
        "versions": versions(),
        "run_dir": str(run_dir),
        **({"budget": budget} if budget else {}),
        **({"knowledge": knowledge} if knowledge else {}),
    }


def _folder_tokenizer_hash(folder: Path) -> str:
    f = Path(folder) / "tokenizer.json"
    return file_hash(f) if f.is_file() else ""


def save_adapter(
    model, tokenizer, name: str, manifest: dict, state_dict: dict | None = None
) -> Path:
    """Publish the trained adapter at ``$TUNEDESK_HOME/adapters/<name>`` atomically.

    Args:
        state_dict: the weights to write when the model's own are sharded (FSDP: the gathered
            ``finetune.train.parallel.full_trainable_state``); the folder is the same either way.
    """
    paths.safe_name(name, "adapter name")
    target = paths.subdir("adapters") / name
    with paths.atomic_dir(target) as tmp:
        # No embedding layer is trained or resized here; "auto" would ask the Hub for the
        # base's config.json whenever the config names it by id (a continued adapter, DPO).
        model.save_pretrained(
            tmp, safe_serialization=True, state_dict=state_dict, save_embedding_layers=False
        )
        # PEFT records the base by local path; keep the canonical id there for other tools.
        manifest = {
            **manifest,
            "format": MANIFEST_FORMAT,
            "name": name,
            "adapter_hash": file_hash(tmp / "adapter_model.safetensors"),
            "adapter_bytes": (tmp / "adapter_model.safetensors").stat().st_size,
        }
        _fix_base_name(tmp / "adapter_config.json", manifest["base_model"]["name"])
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
        (tmp / "README.md").write_text(model_card(manifest))
    return target


def _fix_base_name(config_path: Path, base_name: str) -> None:
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base_name
    config_path.write_text(json.dumps(config, indent=2))


def model_card(m: dict) -> str:
    t, d, met = m.get("training", {}), m.get("data", {}), m.get("metrics", {})
    lora = m.get("lora", {})
    lines = [
        f"# {m['name']}",
        "",
        f"LoRA adapter for `{m['base_model']['name']}` trained with TuneDesk on "
        f"{m.get('created', '?')}.",
        "",
        f"- Data: `{d.get('path')}` ({d.get('train_rows')} training rows, fingerprint "
        f"`{d.get('fingerprint')}`)",
        f"- LoRA: r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}, "
        f"targets {', '.join(lora.get('target_modules', []))}"
        + (f" in the last {lora['top_layers']} blocks" if lora.get("top_layers") else ""),
        f"- Training: {t.get('device')} {t.get('precision')} "
        f"quantization={t.get('quantization')}, batch {t.get('batch_size')} x accumulation "
        f"{t.get('grad_accum')}, lr {t.get('learning_rate')}, {m.get('steps')} steps",
        *([_budget_line(m["budget"])] if m.get("budget") else []),
        f"- Validation perplexity: {met.get('val_perplexity')} (base model: "
        f"{met.get('base_val_perplexity')})",
        "",
        "Load with `PeftModel.from_pretrained(base_model, this_folder)`.",
        "",
    ]
    return "\n".join(lines)


def _budget_line(b: dict) -> str:
    short = f" (**too short to be useful**: {b['note']})" if b.get("note") else ""
    return (
        f"- Time budget: {b['seconds'] / 60:g} min bought {b['steps']} steps, {b['rows_seen']} "
        f"rows ({b['epochs']:.2f} epochs), {b['tokens_seen']:,} tokens in "
        f"{b['seconds_used']:.0f} s{short}"
    )


# --- checkpoints -------------------------------------------------------------------------


def save_checkpoint(
    run_dir: Path,
    step: int,
    model,
    optimizer,
    scheduler,
    keep: int = 2,
    scaler=None,
    sharded: tuple[dict, dict] | None = None,
    progress: dict | None = None,
) -> Path:
    """Adapter weights + optimizer + scheduler + RNG (and fp16 scaler) state at ``step``,
    atomically; keeps the last ``keep``.

    Args:
        sharded: under FSDP, the gathered (model, optimizer) states keyed by parameter name
            (``finetune.train.parallel``); they are kept whole in the checkpoint for resuming.
        progress: what the run has used so far (tokens seen, seconds of a time budget), kept
            as ``progress.json`` for a resumed run to continue from (``checkpoint_progress``).
    """
    ckpt_root = run_dir / "checkpoints"
    target = ckpt_root / f"step-{step:07d}"
    if target.exists():
        return target
    state = {
        "optimizer": sharded[1] if sharded else optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": step,
        "rng": torch.get_rng_state(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        # The current GPU's generator draws the LoRA dropout masks on CUDA.
        "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None,
        "sharding": "fsdp" if sharded else "ddp",
        "model": sharded[0] if sharded else None,
    }
    with paths.atomic_dir(target) as tmp:
        model.save_pretrained(
            tmp,
            safe_serialization=True,
            state_dict=sharded[0] if sharded else None,
            save_embedding_layers=False,  # as save_adapter: nothing asked of the Hub
        )
        torch.save(state, tmp / "trainer_state.pt")
        (tmp / "progress.json").write_text(json.dumps(progress or {}))
    for old in sorted(p for p in ckpt_root.iterdir() if p.name.startswith("step-"))[:-keep]:
        # Hidden first (one rename): a kill mid-delete leaves no half checkpoint in view.
        trash = old.with_name(f".trash-{old.name}")
        os.replace(old, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(
        p
        for p in root.iterdir()
        if p.name.startswith("step-") and (p / "trainer_state.pt").is_file()
    )
    return done[-1] if done else None


def no_checkpoint_note(run_dir: Path) -> str:
    """What a resume of a run folder holding no checkpoint does, in a sentence: it trains from
    step 0 (a run stopped before its first checkpoint starts again), as docs/guide.md says."""
    return (
        f"--resume found no checkpoint in {run_dir} (its run stopped before the first one, or "
        "none ran there), so there is nothing to continue: this run trains from step 0 with "
        "the settings given"
    )


def checkpoint_progress(ckpt: Path) -> dict:
    """The ``progress`` saved with a checkpoint (``{}`` for checkpoints written
    before it existed)."""
    f = ckpt / "progress.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def load_checkpoint(ckpt: Path, model, optimizer, scheduler, scaler=None) -> int:
    """Restore a checkpoint into live objects; returns the step it was taken at.

    Tensors load onto the CPU first: saved from ``cuda:0``, they would otherwise all land on
    GPU 0 in every DDP rank; ``optimizer.load_state_dict`` then moves each onto its parameter's
    device.

    Raises:
        ValueError: the checkpoint cannot be read, was written by an FSDP run, or was trained
            with other LoRA settings than ``model``'s (rank, alpha, dropout, targets, blocks,
            base model: :mod:`finetune.train.resume_check`; a resume takes the run's settings
            from its command line, never the checkpoint's).
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from finetune.train.resume_check import refusal

    def unreadable(err: Exception) -> ValueError:
        return ValueError(
            f"checkpoint {ckpt.name} in {ckpt.parent.parent} cannot be read "
            f"({' '.join(str(err).split())[:160] or type(err).__name__}): move that folder "
            "away to resume from the checkpoint before it, or train anew without --resume"
        )

    try:
        # Our own file, never user input, hence weights_only=False (it holds the RNG states).
        state = torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=False)
    except Exception as err:  # truncated or zeroed: pickle raises its own types
        raise unreadable(err) from None
    if state.get("sharding") == "fsdp":  # its weights are in shards, not adapter_model
        raise ValueError(
            f"checkpoint {ckpt.name} was written by an fsdp run: resume it with sharding fsdp"
        )
    other_settings = refusal(ckpt, model)  # another alpha or base loads without an error
    if other_settings:
        raise ValueError(other_settings)
    try:
        weights = load_file(ckpt / "adapter_model.safetensors")
    except Exception as err:  # truncated or zeroed: safetensors raises its own types
        raise unreadable(err) from None
    try:
        loaded = set_peft_model_state_dict(model, weights)
        if any("lora_" in key for key in loaded.unexpected_keys):
            raise ValueError("its LoRA weights are not this run's")
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError) as err:  # torch's size mismatch, the optimizer's groups
        raise ValueError(_settings_differ(ckpt, model)) from err
    _restore_small_state(state, scheduler, scaler)
    return int(state["step"])


def _settings_differ(ckpt: Path, model) -> str:
    """The sentence for a checkpoint whose LoRA weights do not fit the run resuming it."""

    def described(c: dict) -> str:
        targets = c.get("target_modules")
        targets = targets if isinstance(targets, str) else ", ".join(sorted(targets or []))
        layers = c.get("layers_to_transform")
        return (
            f"LoRA rank {c.get('r')}, alpha {c.get('lora_alpha')}, targets {targets}"
            + (f" in blocks {min(layers)}-{max(layers)}" if layers else "")
            + f", base {c.get('base_model_name_or_path')}"
        )

    try:
        saved = described(json.loads((ckpt / "adapter_config.json").read_text()))
    except (OSError, ValueError):
        saved = "other LoRA settings"
    return (
        f"checkpoint {ckpt.name} in {ckpt.parent.parent} was trained with {saved}; this run "
        f"has {described(model.peft_config['default'].to_dict())}: resume with the settings "
        "the run began with, or train anew without --resume"
    )


def load_sharded_checkpoint(
    run_dir: Path, model, optimizer, scheduler, rank: int
) -> tuple[int, str]:
    """FSDP's resume: rank 0 reads the latest checkpoint and every rank takes its shards of the
    LoRA weights and optimizer state (works when only node 0 sees the run folder).

    Returns:
        The step it was taken at and its name; ``(0, "")`` when there is none.
    """
    from finetune.train import parallel

    ckpt = parallel.broadcast_object(latest_checkpoint(run_dir), rank)
    if ckpt is None:
        return 0, ""
    state = (
        torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=False)
        if rank == 0
        else {}
    )
    if rank == 0 and state.get("sharding") != "fsdp":
        state = {"bad": True}
    if parallel.broadcast_object(state.get("bad", False), rank):
        raise ValueError(
            f"checkpoint {ckpt.name} was written by a ddp run: resume it with sharding ddp"
        )
    from finetune.train.resume_check import refusal

    other_settings = parallel.broadcast_object(refusal(ckpt, model) if rank == 0 else None, rank)
    if other_settings:  # every rank stops, with the sentence rank 0 read
        raise ValueError(other_settings)
    parallel.load_full_state(model, optimizer, state.pop("model", {}), state.pop("optimizer", {}))
    state = parallel.broadcast_object(state, rank)  # what is left is small: scheduler, RNG, step
    _restore_small_state(state, scheduler, None)
    return int(state["step"]), ckpt.name


def resume(
    run_dir: Path, model, optimizer, scheduler, scaler, rank: int, world: int, sharded: bool
) -> tuple[int, str, dict]:
    """Restore the latest checkpoint in ``run_dir`` into live objects, on every rank.

    Returns:
        The step it was taken at, its name and its ``progress`` (tokens seen, time budget
        used); ``(0, "", {})`` when there is none.
    """
    from finetune.train import parallel

    if sharded:
        step, name = load_sharded_checkpoint(run_dir, model, optimizer, scheduler, rank)
    elif (ckpt := latest_checkpoint(run_dir)) is not None:
        step, name = load_checkpoint(ckpt, model, optimizer, scheduler, scaler), ckpt.name
    else:
        step, name = 0, ""
    progress = checkpoint_progress(run_dir / "checkpoints" / name) if name and rank == 0 else {}
    return step, name, parallel.broadcast_object(progress, rank) if world > 1 else progress


def _restore_small_state(state: dict, scheduler, scaler) -> None:
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
