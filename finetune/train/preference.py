"""Preference tuning: an adapter from the shelf trained further on (prompt, chosen, rejected)
pairs with TRL's trainers, saved as a new version that names the one it started from.

Methods:

- ``dpo``: TRL's ``DPOTrainer`` (sigmoid loss). The adapter itself trains; its starting copy is
  the reference (TRL adds it as a second, frozen LoRA, so no second model is loaded). Off a GPU
  the reference scores every pair once, before the first step, not at each step
  (:func:`finetune.train.preference_head.precompute_reference`).
- ``cpo``: the same trainer and losses without the reference: DPO's loss on the answers' own
  log-probabilities (CPO, Xu et al. 2024; TRL's documented precomputed-reference input set to
  zero, so no reference forward runs), beside the SFT term. A pair already won by a wide margin
  stops pulling; the lost ones pull hardest, which is what the accuracy below counts.
- ``orpo``: TRL's ``ORPOTrainer`` (``trl.experimental``): reference-free too, an odds-ratio term
  on per-token averages beside the SFT loss.

Pairs come from the review queue (``python -m feedback export`` writes ``<name>-pairs.jsonl``)
or any JSON lines with ``prompt`` (text or a list of messages), ``chosen`` and ``rejected``
(text). The new adapter's manifest keeps the parent's base model and data (so evaluation
and the release gate read the same held-out rows) and adds ``lineage``: the parent's name and
weights hash, the method and how many pairs it saw.

:func:`finetune.train.preference_accuracy.preference_accuracy` is the measure: the share of
pairs where the adapter gives the chosen answer a higher log-probability than the rejected one
(summed over answer tokens).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from core import models, paths
from core.hashing import file_hash
from finetune.config import PREFERENCE_METHODS as METHODS
from finetune.config import budget_problems
from finetune.preference_defaults import METHOD_DEFAULTS
from finetune.train.preference_progress import PreferenceProgress, emitter

DPO_LOSSES = ("sigmoid", "apo_zero", "ipo")


@dataclass
class PreferenceConfig:
    """One preference run (defaults sized for a 2-core CPU and a few hundred pairs)."""

    adapter: str  # the shelf adapter to start from
    pairs: str  # a JSON lines file of pairs
    name: str = ""  # the new adapter's name (default: <adapter>-<method>)
    method: str = "dpo"
    # None (beta, learning_rate, sft_weight, epochs, batch_size): the method's measured default
    # (finetune.preference_defaults.METHOD_DEFAULTS)
    beta: float | None = None
    learning_rate: float | None = None
    # DPO / CPO: weight of a plain SFT term on the chosen answers beside the preference loss
    # (RPO). Without it DPO widened the margins by lowering both answers: Bitext perplexity
    # 3.1 -> 22.7 and the release gate failed (docs/benchmarks.md). ORPO has its own.
    sft_weight: float | None = None
    # DPO only: TRL's preference loss. "sigmoid" is DPO's; "apo_zero" (anchored: raises the
    # chosen answers' likelihood and lowers the rejected ones' each on its own) measured no
    # better on Bitext (docs/benchmarks.md); "ipo" (a margin it stops pushing at) not yet run.
    loss: str = "sigmoid"
    epochs: float | None = None
    max_steps: int = -1
    batch_size: int | None = None  # None: the method's measured default (4)
    grad_accum: int = 1
    max_length: int = 256
    max_pairs: int = 0  # 0: all
    seed: int = 0
    # TRL's DPO turns it on by default; off, as in supervised training (a 135M model's
    # activations are small): its recomputation was 9 % of a DPO step's samples in a profile
    # on 2 cores (docs/benchmarks.md).
    gradient_checkpointing: bool = False
    # DPO / CPO off a GPU: the answer tokens' log-probs through finetune.train.preference_head
    # (answer tokens only, in the run's precision, no logits recomputed in backward) instead
    # of TRL's fused head, and DPO's reference scored once before training instead of at each
    # step; False: TRL's own (the benchmark's baseline).
    lean_head: bool = True
    # Seconds from the run's start to the saved adapter (0: off); the method's epochs still cap
    # the steps (finetune/train/preference_budget.py).
    time_budget_s: float = 0.0
    device: str = "auto"  # cpu, cuda, cuda:N, or auto (a GPU when there is one)
    precision: str = "fp32"  # fp32, or bf16 / fp16 under autocast (as supervised training)

    def __post_init__(self):
        defaults = METHOD_DEFAULTS.get(
            self.method, METHOD_DEFAULTS["dpo"]
        )  # a bad method: check() says so
        for field in ("beta", "sft_weight", "learning_rate", "epochs", "batch_size"):
            if getattr(self, field) is None:
                setattr(self, field, getattr(defaults, field))

    def check(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.method not in METHODS:
            raise ValueError(
                f"method must be one of {', '.join(METHODS)} (sft is `finetune train`), got "
                f"{self.method!r}"
            )
        if self.loss not in DPO_LOSSES:
            raise ValueError(f"loss must be one of {', '.join(DPO_LOSSES)}, got {self.loss!r}")
        if not self.sft_weight >= 0:
            raise ValueError(f"sft_weight must be 0 or more, got {self.sft_weight}")
        for field, low in (("beta", 0.0), ("learning_rate", 0.0)):
            if not getattr(self, field) > low:
                raise ValueError(f"{field} must be above {low}, got {getattr(self, field)}")
        for field in ("batch_size", "grad_accum", "max_length"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be at least 1, got {getattr(self, field)}")
        if self.max_steps == 0 or (self.max_steps < 0 and not self.epochs > 0):
            raise ValueError("train for some steps: --max-steps N or --epochs above 0")
        if problems := budget_problems(self.time_budget_s):
            raise ValueError(problems[0])


@dataclass
class PreferenceResult:
    name: str
    path: Path
    steps: int
    pairs: int
    seconds: float
    final_loss: float | None
    status: str = "completed"  # or "stopped" (saved at the step it reached)
    reference_seconds: float = 0.0  # of ``seconds``: DPO's reference scored before the first step


def output_name(adapter: str, method: str, name: str = "") -> str:
    """The shelf name a preference run saves under: ``name``, or ``<adapter>-<method>``."""
    return name or f"{adapter}-{method}"


def read_pairs(path: str | Path, limit: int = 0) -> list[dict]:
    """Pairs as ``{"prompt": [messages], "chosen": str, "rejected": str}``.

    Raises:
        ValueError: an unreadable file, a row without the three fields (its line named), none.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read pairs from {path}: {err}") from None
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"{path.name} line {number} is not JSON") from None
        prompt, chosen, rejected = (
            row.get(k) if isinstance(row, dict) else None for k in ("prompt", "chosen", "rejected")
        )
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not (
            isinstance(prompt, list)
            and prompt
            and isinstance(chosen, str)
            and isinstance(rejected, str)
            and chosen.strip()
            and rejected.strip()
        ):
            raise ValueError(
                f"{path.name} line {number}: a pair needs prompt (text or messages), chosen and "
                "rejected (non-empty text)"
            )
        pairs.append(
            {
                "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
                "chosen": chosen,
                "rejected": rejected,
            }
        )
        if limit and len(pairs) >= limit:
            break
    if not pairs:
        raise ValueError(f"{path.name} holds no pairs")
    return pairs


def load_policy(adapter: str, trainable: bool = True):
    """(PeftModel with ``adapter`` loaded, tokenizer, the adapter's manifest), float32 on the CPU
    (TRL's trainer moves it to the run's device; bf16 / fp16 run under autocast).

    Raises:
        ValueError: no such adapter, a broken one, or one trained on another base.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.shelf.adapter_folder import check_base, read_adapter_folder

    folder = paths.subdir("adapters") / paths.safe_name(adapter, "adapter name")
    manifest = read_adapter_folder(adapter, folder)
    resolved = models.resolve((manifest.get("base_model") or {}).get("name") or "default")
    check_base(adapter, manifest, resolved)
    tokenizer = AutoTokenizer.from_pretrained(resolved.path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = AutoModelForCausalLM.from_pretrained(resolved.path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, folder, is_trainable=trainable)
    return model, tokenizer, manifest


def train_preference(
    cfg: PreferenceConfig,
    on_log=None,
    *,
    on_event=None,
    stop=None,
    run_dir: str | Path | None = None,
    started: float | None = None,
) -> PreferenceResult:
    """Train ``cfg.adapter`` on ``cfg.pairs``; the result is a new adapter on the shelf.

    Args:
        on_log: ``on_log(step, total, logs)`` at every logged step (TRL's own figures).
        on_event: events as supervised training writes them (``start``, ``progress``,
            ``saved``, ``done``), so the Train tab's progress and ``--events`` read both.
        stop: asked after each step; True ends the run, which saves at the step it reached.
        run_dir: the run folder (default ``runs/<name>-<time>``).
        started: when the run began (``time.time()``; default now): a time budget counts from it.

    Raises:
        ValueError: a bad setting, adapter or pairs file.
    """
    cfg.check()
    t0 = started or time.time()
    name = paths.safe_name(output_name(cfg.adapter, cfg.method, cfg.name), "adapter name")
    if (paths.subdir("adapters") / name).exists():
        raise ValueError(f"an adapter named {name!r} is already on the shelf; pick another --name")
    pairs = read_pairs(cfg.pairs, cfg.max_pairs)
    cfg = _on_this_machine(cfg)
    emit = emitter(on_event)
    emit("status", message=f"loading {cfg.adapter} for {cfg.method} on {len(pairs)} pairs")
    model, tokenizer, parent = load_policy(cfg.adapter)
    if not cfg.device.startswith(
        "cuda"
    ):  # as supervised training on the CPU: -9 % a DPO step in bf16
        from finetune.train.fused import use_lean_ops

        use_lean_ops(model)
    run_dir = (
        Path(run_dir)
        if run_dir
        else paths.subdir("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    targets = model.peft_config[model.active_adapter].target_modules
    progress = PreferenceProgress(
        emit,
        on_log,
        stop,
        cfg.device,
        pairs=len(pairs),
        method=cfg.method,
        trainable_params=sum(p.numel() for p in model.parameters() if p.requires_grad),
        targets=[targets] if isinstance(targets, str) else sorted(targets),
    )
    budget = None
    if cfg.time_budget_s:
        from finetune.train.preference_budget import PreferenceBudget

        budget = PreferenceBudget(
            cfg.time_budget_s,
            t0,
            device=cfg.device,
            grad_accum=cfg.grad_accum,
            trainable=progress.run["trainable_params"],
        )
    # The budget's callback first: it decides whether the plan ends at a step; the
    # stop request after it
    trainer = _trainer(
        cfg,
        model,
        tokenizer,
        pairs,
        run_dir,
        ([budget.callback()] if budget else []) + [progress.callback()],
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for quiet in (
        PrinterCallback,
        ProgressCallback,
    ):  # progress goes to on_log / on_event, not stdout
        trainer.remove_callback(quiet)
    start, reference_seconds = time.perf_counter(), 0.0
    if cfg.method == "dpo" and _lean(cfg):
        from finetune.train.preference_head import precompute_reference

        emit(
            "status",
            message=f"scoring the {len(pairs)} pairs under {cfg.adapter} once (DPO's reference)",
        )
        precompute_reference(
            trainer, cfg.precision, cfg.batch_size, budget.reference_stop(stop) if budget else stop
        )
        reference_seconds = time.perf_counter() - start
        if budget and budget.reference_cut:
            emit(
                "warning",
                message=(
                    "the time budget ran out while scoring DPO's reference: the run trains "
                    "only "
                    "in what is left of it (scoring the reference at each step); give it more "
                    "minutes or fewer pairs"
                ),
            )
    output = trainer.train()
    seconds = time.perf_counter() - start
    status = "stopped" if progress.stopped else "completed"
    policy = trainer.model
    if "ref" in getattr(policy, "peft_config", {}):
        policy.delete_adapter("ref")  # TRL's frozen copy of the starting adapter
    from finetune.train.saving import save_adapter

    manifest = {
        k: v
        for k, v in parent.items()
        if k
        not in (
            "format",
            "name",
            "adapter_hash",
            "adapter_bytes",
            "eval",
            "gate",
            "metrics",
            "probes",
        )
    }
    manifest.update(
        {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "status": status,
            "steps": trainer.state.global_step,
            "total_steps": trainer.state.max_steps,
            **(
                {
                    "budget": budget.bought(
                        trainer.state, len(pairs), cfg.batch_size, cfg.grad_accum, progress.tokens
                    )
                }
                if budget
                else {}
            ),
            "lineage": {
                "parent": cfg.adapter,
                "parent_hash": parent.get("adapter_hash"),
                "method": cfg.method,
                "pairs": len(pairs),
                "pairs_file": str(cfg.pairs),
                "pairs_hash": file_hash(Path(cfg.pairs)),
            },
            "preference": {**asdict(cfg), "final_loss": output.training_loss},
            "timings": {
                "train_seconds": round(seconds, 1),
                "reference_seconds": round(reference_seconds, 1),
            },
            "run_dir": str(run_dir),
        }
    )
    path = save_adapter(policy, tokenizer, name, manifest)
    emit("saved", adapter=name, path=str(path), status=status)
    emit(
        "done",
        status=status,
        step=trainer.state.global_step,
        adapter=name,
        metrics={"train_loss": output.training_loss},
    )
    return PreferenceResult(
        name,
        path,
        trainer.state.global_step,
        len(pairs),
        seconds,
        output.training_loss,
        status,
        reference_seconds,
    )


def _on_this_machine(cfg: PreferenceConfig) -> PreferenceConfig:
    """``cfg`` with ``auto`` resolved to a device here; ValueError if the device or precision
    cannot run on this machine (fp16 on a CPU, bf16 on a pre-Ampere GPU, no GPU)."""
    from dataclasses import replace

    from core.gpu import use_device
    from core.hardware import detect

    hardware = detect()
    device = hardware.default_device if cfg.device == "auto" else cfg.device
    problems = hardware.problems(device, cfg.precision, "none")
    if problems:
        raise ValueError(f"cannot run {cfg.method} here: " + "; ".join(problems))
    use_device(device)
    return replace(cfg, device=device)


def _lean(cfg: PreferenceConfig) -> bool:
    """Whether DPO / CPO take their log-probabilities from the lean head (off a GPU)."""
    return cfg.lean_head and not cfg.device.startswith("cuda")


def _trainer(
    cfg: PreferenceConfig, model, tokenizer, pairs: list[dict], run_dir: Path, callbacks: list
):
    from datasets import Dataset

    rows = Dataset.from_list(
        [
            {
                "prompt": p["prompt"],
                "chosen": [{"role": "assistant", "content": p["chosen"]}],
                "rejected": [{"role": "assistant", "content": p["rejected"]}],
            }
            for p in pairs
        ]
    )
    common = {
        "output_dir": str(run_dir),
        "per_device_train_batch_size": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "learning_rate": cfg.learning_rate,
        "num_train_epochs": cfg.epochs,
        "max_steps": cfg.max_steps,
        "max_length": cfg.max_length,
        "beta": cfg.beta,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "seed": cfg.seed,
        "use_cpu": not cfg.device.startswith("cuda"),
        "bf16": cfg.precision == "bf16",
        "fp16": cfg.precision == "fp16",
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "gradient_checkpointing": cfg.gradient_checkpointing,
    }
    if cfg.method in ("dpo", "cpo"):
        from trl import DPOConfig, DPOTrainer

        losses = (
            {"loss_type": [cfg.loss, "sft"], "loss_weights": [1.0, cfg.sft_weight]}
            if cfg.sft_weight
            else {"loss_type": [cfg.loss]}
        )
        trainer_class = DPOTrainer
        if _lean(cfg):
            from finetune.train.preference_head import with_lean_head

            trainer_class = with_lean_head(DPOTrainer, cfg.precision)
        trainer = trainer_class(
            model=model,
            args=DPOConfig(**common, **losses),
            train_dataset=rows,
            processing_class=tokenizer,
            callbacks=callbacks,
        )
        if cfg.method == "cpo":  # reference log-probs of zero: the losses see the policy's own
            zeros = [0.0] * len(trainer.train_dataset)
            trainer.train_dataset = trainer.train_dataset.add_column(
                "ref_chosen_logps", zeros
            ).add_column("ref_rejected_logps", zeros)
            trainer.precompute_ref_logps = (
                True  # read them from the rows, as TRL does when it precomputes
            )
        return trainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    return ORPOTrainer(
        model=model,
        args=ORPOConfig(**common),
        train_dataset=rows,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
