"""One benchmark row, measured in this process: the seed recipe or TuneDesk's training loop.

Both recipes train the same LoRA adapter on the same tokenized rows, in the same order, for
the same number of optimizer steps, with the same learning-rate schedule and clipping:

* **seed**: ``transformers.Trainer`` as the seed scripts ran it: every example padded to
  ``max_length``, ``labels = input_ids`` on every real token (prompt included; padding masked
  with -100, as ``DataCollatorForLanguageModeling`` does), so the LM head runs on every
  position (B x max_length), padding included. The Trainer's own defaults otherwise (its
  optimizer is fused AdamW on torch >= 2.8); no logging, eval or saving inside the loop, so
  the baseline pays no host syncs for logging.
* **tunedesk**: the loop of :func:`finetune.train.train`, from the same pieces
  (``run_setup.to_batch``, ``train.forward_backward``, the same optimizer step): packed rows
  when the architecture supports it, logits only where a response label is, foreach AdamW on
  the CPU and fused on CUDA.

The first ``warmup_steps`` steps run untimed; counts come from ``bench_measure.TokenCounter``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from bench.training.grid import BenchArgs, Point, model_flops, run_config
from bench.training.measure import TokenCounter, Window, matmul_rate, model_shape


def _resolve(args: BenchArgs):
    """``(resolved, config)``: where the tokenizer (and weights) are, and the model config."""
    from transformers import AutoConfig

    from core.models import ResolvedModel, resolve

    if not args.config_json:
        resolved = resolve(args.model)
        return resolved, AutoConfig.from_pretrained(resolved.path)
    path = Path(args.config_json)
    values = json.loads(path.read_text())
    has_tokenizer = any(
        (path.parent / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
    )
    try:
        folder = path.parent if has_tokenizer else resolve(args.model).path
    except ValueError as err:
        raise ValueError(f"no tokenizer beside {path}, and --model gives none: {err}") from None
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    return ResolvedModel(args.model, folder, "config", config.model_type, "random-weights"), config


def _random_base(config, resolved, device: str, precision: str, quantization: str):
    """The architecture with random weights (speed does not depend on the weights)."""
    from transformers import AutoModelForCausalLM

    from core.models import ResolvedModel
    from finetune.train.model_loading import load_model, torch_dtype

    dtype = torch_dtype(precision) if device.startswith("cuda") else torch.float32
    if quantization == "none":
        return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    # bitsandbytes quantizes while loading: write the random weights to a scratch folder.
    with tempfile.TemporaryDirectory() as tmp:
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
        scratch = ResolvedModel(
            "random", Path(tmp), "config", resolved.architecture, "random-weights"
        )
        return load_model(scratch, device, precision, quantization)


def _build_model(args: BenchArgs, cfg, resolved, config, device: str, lean_ops: bool):
    """``(model with a fresh LoRA adapter, packing)``, loaded as training loads it."""
    from finetune.data.collate import prepare_model_for_packing, supports_packing
    from finetune.train.fused import use_lean_ops
    from finetune.train.model_loading import apply_lora
    from finetune.train.setup import load_lora_model

    if not args.model_from_config:
        model, _, packing = load_lora_model(cfg, resolved, device, lean_ops)
        return model, packing
    t = cfg.train
    model = _random_base(config, resolved, device, t.precision, t.quantization)
    model.config.use_cache = False
    model = apply_lora(model, resolved.architecture, cfg.lora, t.quantization)
    if lean_ops:
        use_lean_ops(model)
    packing = cfg.data.packing and supports_packing(resolved.architecture)
    if packing:
        prepare_model_for_packing(model)
    return model, packing


def load_row_model(args: BenchArgs, point: Point, device: str):
    """``(LoRA model, packing)`` for ``point``, loaded or built from config as a row would be."""
    resolved, config = _resolve(args)
    return _build_model(
        args, run_config(args, point), resolved, config, device, lean_ops=point.recipe != "seed"
    )


def _tunedesk(
    args: BenchArgs, cfg, model, packing: bool, rows, plan, pad_id: int, device: str, window: Window
) -> float:
    """TuneDesk's loop over ``plan``; returns the last step's loss per label token."""
    from core.gpu import make_scaler
    from finetune.train.setup import to_batch
    from finetune.train.steps import (
        build_optimizer,
        build_scheduler,
        forward_backward,
        make_autocast,
        optimizer_step,
    )

    t = cfg.train
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    scheduler = build_scheduler(optimizer, t.lr_schedule, t.warmup_ratio, len(plan))
    autocast = make_autocast(device, t.precision)
    scaler = make_scaler(
        device, t.precision
    )  # as train() does: fp16 gradients underflow without one
    model.train()
    for i, step in enumerate(plan.steps):
        if i == args.warmup_steps:
            window.start()
        batches = [to_batch(rows, m, pad_id, packing, device) for m in step]
        loss, _ = forward_backward(model, batches, autocast, scaler)
        optimizer_step(model, optimizer, scheduler, scaler, t.max_grad_norm)
    window.stop()
    return float(loss) / max(sum(n for _, n, _ in batches), 1)


def _pad_full(row, width: int, pad_id: int) -> dict:
    """The seed's example: padded to ``width``, every real token a label, padding masked."""
    ids = list(row["input_ids"])
    n = len(ids)
    return {
        "input_ids": ids + [pad_id] * (width - n),
        "attention_mask": [1] * n + [0] * (width - n),
        "labels": ids + [-100] * (width - n),
    }


def _seed(
    args: BenchArgs, cfg, model, rows, plan, pad_id: int, device: str, window: Window
) -> float:
    """The HF Trainer on fully padded rows in ``plan`` order; returns the last step's loss."""
    from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

    t, total = cfg.train, len(plan)
    order = [i for step in plan.steps for micro in step for i in micro]
    data = [_pad_full(rows[i], cfg.data.max_length, pad_id) for i in order]
    losses = []

    class SeedTrainer(Trainer):
        def training_step(self, *a, **k):
            loss = super().training_step(*a, **k)  # this micro-batch's share of the step's mean
            losses.append(loss)
            return loss

    class Timer(TrainerCallback):
        def on_train_begin(self, targs, state, control, **kw):
            if args.warmup_steps == 0:
                window.start()

        def on_step_end(self, targs, state, control, **kw):
            if state.global_step == args.warmup_steps:
                window.start()
            if state.global_step == total:
                window.stop()

    schedule = {"constant": "constant_with_warmup"}.get(t.lr_schedule, t.lr_schedule)
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=t.batch_size,
            gradient_accumulation_steps=t.grad_accum,
            max_steps=total,
            learning_rate=t.learning_rate,
            lr_scheduler_type=schedule,
            warmup_steps=int(round(t.warmup_ratio * total)),
            weight_decay=t.weight_decay,
            max_grad_norm=t.max_grad_norm,
            bf16=t.precision == "bf16",
            fp16=t.precision == "fp16",
            use_cpu=device == "cpu",
            seed=t.seed,
            report_to=[],
            logging_strategy="no",
            save_strategy="no",
            eval_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
            train_sampling_strategy="sequential",
        )
        SeedTrainer(
            model=model,
            args=targs,
            train_dataset=data,
            data_collator=default_data_collator,
            callbacks=[Timer()],
        ).train()
    return float(sum(losses[-t.grad_accum :]))


def _response_val_loss(
    model, val_rows, n: int, pad_id: int, device: str, precision: str
) -> float | None:
    """Mean NLL per response token on the first ``n`` held-out rows (same rows for both recipes)."""
    from finetune.train.setup import to_batch
    from finetune.train.steps import make_autocast, validation_loss

    n = min(n, len(val_rows))
    if n == 0:
        return None
    batches = [
        to_batch(val_rows, range(i, min(i + 8, n)), pad_id, False, device)[0]
        for i in range(0, n, 8)
    ]
    return validation_loss(model, batches, make_autocast(device, precision))


def _plan(args: BenchArgs, cfg, rows, can_pack: bool):
    """One plan for both recipes (same rows, same order), grouped by length as ``train()``
    groups them when the architecture cannot pack."""
    from finetune.train.steps import plan_steps

    t = cfg.train
    plan = plan_steps(
        [len(r["input_ids"]) for r in rows],
        t.batch_size,
        t.grad_accum,
        t.epochs,
        t.max_steps,
        t.seed,
        group_by_length=not can_pack,
    )
    if len(plan) <= args.warmup_steps:
        raise ValueError(
            f"{len(plan)} steps leave none to time after {args.warmup_steps} warm-up steps; "
            "raise --max-steps (or --epochs / --max-samples)"
        )
    return plan


def measure(args: BenchArgs, point: Point) -> dict:
    """Train ``point.recipe`` for the configured steps and report speed, memory and loss.

    Returns:
        recipe, device, packing, timed_steps, examples, real_tokens, logit_positions,
        head_positions, causal_pairs, seconds, real_tokens_per_s, peak_memory_gib, final_loss,
        response_val_loss, model_flops, token_flops (the head counted on every real token,
        as issue 8's "4 x parameters per token" goal counts it).

    Raises:
        ValueError: too few steps to leave any timed after the warm-up.
    """
    from finetune import data as data_mod
    from finetune.train.model_loading import load_tokenizer
    from finetune.train.steps import peak_memory_gib

    cfg = run_config(args, point)
    device = (
        "cpu" if point.device == "cpu" else ("cuda:0" if point.device == "cuda" else point.device)
    )
    torch.manual_seed(args.seed)
    resolved, config = _resolve(args)
    tokenizer = load_tokenizer(resolved)
    prepared = data_mod.prepare(cfg.data, tokenizer)
    rows, pad = list(prepared.train), tokenizer.pad_token_id
    model, can_pack = _build_model(
        args, cfg, resolved, config, device, lean_ops=point.recipe != "seed"
    )
    plan = _plan(args, cfg, rows, can_pack)
    packing = can_pack and point.recipe == "tunedesk"
    counter = TokenCounter(model)
    window = Window(counter, device)
    if point.recipe == "seed":
        loss = _seed(args, cfg, model, rows, plan, pad, device, window)
    else:
        loss = _tunedesk(args, cfg, model, packing, rows, plan, pad, device, window)
    counter.remove()
    peak, c = peak_memory_gib(device), window.counts
    # Model FLOPs count the head where its output is used: every real token for the seed's
    # loss, label tokens only for TuneDesk (which computes no other logits).
    head = c["real"] if point.recipe == "seed" else c["logits"]
    shape = model_shape(config, resolved.architecture, cfg.lora)
    flops = model_flops(shape, c["real"], head, c["pairs"])
    val = _response_val_loss(
        model, list(prepared.val), args.val_rows, pad, device, cfg.train.precision
    )
    return {
        "recipe": point.recipe,
        "device": device,
        "packing": packing,
        "timed_steps": len(plan) - args.warmup_steps,
        "examples": c["examples"],
        "real_tokens": c["real"],
        "logit_positions": c["logits"],
        "head_positions": head,
        "causal_pairs": c["pairs"],
        "seconds": window.seconds,
        "real_tokens_per_s": c["real"] / max(window.seconds, 1e-9),
        "peak_memory_gib": peak,
        "final_loss": loss,
        "response_val_loss": val,
        "model_flops": flops,
        "token_flops": model_flops(shape, c["real"], c["real"], c["pairs"]),
    }


def run_one(text: str) -> dict:
    """The ``--_one`` entry, in the row's own process: set threads once, then measure a row or
    the matmul rate."""
    import contextlib
    import sys

    from finetune.train.model_loading import set_cpu_threads

    job = json.loads(text)
    if job["device"] == "cpu":
        set_cpu_threads(job["threads"])
    # Library chatter (the Trainer prints its metrics) must not mix with the result line.
    with contextlib.redirect_stdout(sys.stderr):
        if job["kind"] == "matmul":
            return {"tflops": matmul_rate(job["device"], job["precision"])}
        point = Point(**{**job["point"], "device": job["device"]})
        return measure(BenchArgs(**job["args"]), point)
