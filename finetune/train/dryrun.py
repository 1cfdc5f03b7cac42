"""Before a long run: will it fit (``estimate_memory``) and how long will it take (``dry_run``).

``estimate_memory`` is arithmetic over the model's config (built on the meta device, so no
weights are read), per training process:

* weights: quantized linear layers at 1 byte (8-bit) or ~0.53 byte (4-bit NF4 with double
  quantization) per parameter, everything else at 4 bytes (fp32 on the CPU, and after k-bit
  preparation) or 2 bytes (fp16/bf16 on CUDA);
* LoRA: ``r * (in + out)`` parameters per target layer, 16 bytes each (fp32 weight, gradient
  and AdamW's two moments);
* activations: ``ACT_VALUES * batch * row tokens * hidden * layers`` values kept for the
  backward pass, 4 bytes each in fp32 and 2 under autocast. Korthikanti et al. (2022) count
  about 17 values per hidden unit for a GPT layer; ``ACT_VALUES`` is the count taken from a
  measured step of the default model with the lean SwiGLU (``finetune.train.fused``), LoRA on
  every linear layer and no LoRA dropout. LoRA dropout keeps a dropped-out copy of every
  adapted input (``DROPOUT_VALUES`` more), and packed rows get a dense block mask and attention
  over long rows (``PACKED_ACT_VALUES``). With gradient checkpointing only each layer's input is
  kept, plus one layer being recomputed. With LoRA on the last N blocks only, the blocks below
  need no gradient and keep nothing: N layers count. Under the
  CPU's bf16 autocast, short padded rows (``finetune.train.cpu_attention``) also keep each
  layer's attention weights: ``SHORT_ROW_BYTES`` per head and key (fp32 softmax, bf16 copy) for
  up to ``SHORT_ROW_TOKENS`` keys;
* logits: the loss runs the LM head on label tokens only (``finetune.train.steps.loss_sum``) and,
  in fp32 on one process, in chunks of ``CE_CHUNK_ROWS`` whose logits are never kept
  (``finetune.train.fused``); otherwise ``LOGIT_COPIES * label_tokens * vocab`` fp32 values
  (logits, softmax, their gradient);
* a fixed runtime overhead (Python and torch libraries on the CPU, the CUDA context).

``dry_run`` loads the model exactly as ``train()`` does and times one optimizer step on the
longest training rows (a worst case), measuring the process's real peak memory. Where the run
resolves a batch size ``auto`` (``finetune.train.batch_fit``) or compiles its decoder layers
(``finetune.train.compiled``), the dry run does so too: the step it times is at that batch and
compiled, after a first step that compiled them and is reported apart.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from finetune.config import RunConfig, micro_batch
from finetune.data.passages import token_limit
from finetune.train.cpu_attention import SHORT_ROW_TOKENS
from finetune.train.fused import CE_CHUNK_ROWS

ACT_VALUES = 16  # activation values kept per token, layer and hidden unit (see above)
DROPOUT_VALUES = 10  # more of them with LoRA dropout > 0
PACKED_ACT_VALUES = 48
SHORT_ROW_BYTES = 6
LOGIT_COPIES = 3
RUNTIME_GIB = {"cpu": 0.6, "cuda": 0.5}  # torch and friends in RSS; the CUDA context
QUANT_BYTES = {"none": None, "8bit": 1.0, "4bit": 0.53}
GIB = 2**30


def label_share(rows) -> float:
    """Share of tokens that carry a label (the response part) in tokenized ``rows``."""
    total = labelled = 0
    for r in rows:
        total += len(r["labels"])
        labelled += sum(1 for x in r["labels"] if x != -100)
    return labelled / total if total else 1.0


def _block_index(module_name: str) -> int | None:
    """The transformer block a module sits in (``model.layers.12.mlp.up_proj`` -> 12)."""
    return next((int(part) for part in module_name.split(".") if part.isdigit()), None)


def model_counts(resolved, cfg) -> dict:
    """Parameter counts of the base and of its LoRA adapter, from the config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from finetune.train.model_loading import resolve_targets, top_layer_indices

    trust = cfg.model.trust_remote_code
    config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=trust)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    targets = set(resolve_targets(model, resolved.architecture, cfg.lora))
    blocks = top_layer_indices(model, cfg.lora.top_layers)
    adapted = set(blocks) if blocks is not None else None
    quantizable = lora = 0
    for name, module in model.named_modules():
        weight, leaf = getattr(module, "weight", None), name.rsplit(".", 1)[-1]
        if (
            not isinstance(weight, torch.Tensor)
            or weight.dim() != 2
            or isinstance(module, torch.nn.Embedding)
        ):
            continue
        if leaf in targets and (adapted is None or _block_index(name) in adapted):
            lora += cfg.lora.r * sum(weight.shape)
        quantizable += weight.numel() if leaf != "lm_head" else 0  # bitsandbytes keeps the head
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "quantizable": quantizable,
        "lora": lora,
        "hidden": text.hidden_size,
        "layers": text.num_hidden_layers,
        "vocab": text.vocab_size,
        "heads": text.num_attention_heads,
        # blocks that keep activations for backward: those below `top_layers` need no gradient
        "backward_layers": len(adapted) if adapted is not None else text.num_hidden_layers,
    }


def estimate_memory(cfg, resolved, label_share: float = 1.0) -> dict:
    """Memory one training process needs, by part, and whether it fits the chosen device.

    Args:
        cfg: the run configuration (batch size, max length, precision, quantization, LoRA).
        resolved: the base model (``core.models.ResolvedModel``).
        label_share: share of tokens that are labels; 1.0 (every token) is the worst case.

    Returns:
        GiB per part (weights, lora_and_optimizer, activations, logits, runtime), total_gib,
        device, device_gib, fits, and ``warning`` (a sentence, empty when it fits).
    """
    from core.hardware import detect

    t = cfg.train
    dev = detect().device(t.device)
    on_cuda = dev.name.startswith("cuda")
    c = model_counts(resolved, cfg)
    wide = 2 if on_cuda and t.precision != "fp32" and t.quantization == "none" else 4
    if QUANT_BYTES[t.quantization] is None:
        weights = c["params"] * wide
    else:
        weights = (
            c["quantizable"] * QUANT_BYTES[t.quantization] + (c["params"] - c["quantizable"]) * 4
        )
    if (
        not on_cuda and t.precision == "bf16" and t.quantization == "none"
    ):  # bf16 copies of the frozen
        weights += (c["quantizable"] + c["vocab"] * c["hidden"]) * 2  # linears and head, cast once
    row = token_limit(cfg.data)  # with passages, rows run longer than max_length
    tokens = micro_batch(t) * row  # "auto": as on the CPU; a GPU's trial steps measure
    act_bytes = 4 if t.precision == "fp32" else 2
    per_layer = (PACKED_ACT_VALUES if cfg.data.packing else ACT_VALUES) + (
        DROPOUT_VALUES if cfg.lora.dropout > 0 else 0
    )
    blocks = c["backward_layers"]
    kept = blocks + per_layer if t.gradient_checkpointing else blocks * per_layer
    act = tokens * c["hidden"] * kept * act_bytes
    if (
        not on_cuda and t.precision == "bf16" and not cfg.data.packing
    ):  # short rows' attention weights
        layers = 1 if t.gradient_checkpointing else blocks
        act += tokens * c["heads"] * min(row, SHORT_ROW_TOKENS) * SHORT_ROW_BYTES * layers
    lean_head = (
        t.precision == "fp32" or (t.precision == "bf16" and not on_cuda)
    ) and cfg.run.nproc_per_node == 1
    # FSDP keeps 1/world of the weights and AdamW state per process, plus the one layer being
    # all-gathered (and the next, prefetched): counted here as two layers' share of the weights.
    world = cfg.run.nproc_per_node * cfg.run.nnodes
    if cfg.run.sharding == "fsdp" and world > 1:
        weights = weights / world + weights * 2 / max(c["layers"], 1)
    logit_values = (
        2 * CE_CHUNK_ROWS * c["vocab"]
        if lean_head
        else LOGIT_COPIES * tokens * label_share * c["vocab"]
    )
    parts = {
        "weights_gib": weights / GIB,
        "lora_and_optimizer_gib": c["lora"]
        * 16
        / (world if cfg.run.sharding == "fsdp" else 1)
        / GIB,
        "activations_gib": act / GIB,
        "logits_gib": logit_values * 4 / GIB,
        "runtime_gib": RUNTIME_GIB["cuda" if on_cuda else "cpu"],
    }
    # CPU processes of one DDP node share the machine's memory; GPUs each have their own.
    procs = 1 if on_cuda else cfg.run.nproc_per_node
    total = sum(parts.values()) * procs
    free = available_gib(dev)
    fits = total <= free
    warning = (
        ""
        if fits
        else (
            f"these settings need about {total:.1f} GiB but {dev.label} has {free:.1f} GiB free: "
            "lower the batch size or max length, turn on gradient checkpointing, or use 4-bit "
            "quantization"
        )
    )
    return {
        **parts,
        "total_gib": total,
        "processes": procs,
        "lora_params": c["lora"],
        "base_params": c["params"],
        "device": dev.name,
        "device_gib": dev.memory_gib,
        "free_gib": free,
        "fits": fits,
        "warning": warning,
    }


def available_gib(dev) -> float:
    """What a new training process can use on ``dev``: free GPU memory (another run, the chat
    model or another user may hold some), not the card's total; all memory for the CPU."""
    from core.gpu import free_memory_gib

    free = free_memory_gib(dev.name)
    if free is None:
        return dev.memory_gib
    import torch

    # Blocks this process's allocator caches but does not use are free for the new run too.
    cached = torch.cuda.memory_reserved(dev.name) - torch.cuda.memory_allocated(dev.name)
    return min(dev.memory_gib, free + cached / GIB)


def _rss_bytes(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak(device: str) -> int:
    """Start a fresh peak-memory window; returns current use in bytes."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    # "5" resets the peak-RSS counter VmHWM (Linux 4.0+); where it cannot, the peak is the
    # process's lifetime peak: still an upper bound.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _rss_bytes()


def _peak(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device)
    return _rss_bytes("VmHWM")


def dry_run(cfg, started: float | None = None) -> dict:
    """Load the model as ``train()`` does and time one optimizer step on the longest rows.

    Nothing is written but, under a time budget, the speeds it measured
    (``finetune.train.speed_record``): no run folder, no checkpoint, no adapter.

    Args:
        started: when the process began (``time.time()``; default: now): a time budget's
            start-up is measured from it, as a run's budget counts from it.

    Returns:
        seconds_per_step, peak_memory_gib (process peak: RSS on CPU, allocated on CUDA),
        memory_added_gib (peak minus use before loading), tokens and label tokens per
        micro-batch, total_steps and projected_seconds (total_steps * seconds_per_step); under a
        time budget also ``budget``: start-up, a step on typical rows, a validation batch, the
        steps the budget buys after them (``finetune.train.budget_plan``), its verdict and sentence.

    Raises:
        ConfigError: the settings cannot run here.
    """
    import torch

    from finetune.train import batch_fit, compiled
    from finetune.train.budget_check import budget_report, first_resolve_seconds, timed_step
    from finetune.train.setup import check_config, cpu_threads, load_data, load_lora_model, to_batch
    from finetune.train.steps import build_optimizer, make_autocast, plan_steps

    t, started = cfg.train, time.time() if started is None else started
    device = check_config(cfg).device(t.device).name
    cpu_threads(t.cpu_threads, device)
    torch.manual_seed(t.seed)
    before = _reset_peak(device)
    one_off = first_resolve_seconds(cfg)  # converting or downloading the base happens once
    resolved, tokenizer, prepared = load_data(cfg)
    compiling = compiled.wanted(t.compile, device, t.quantization)
    model, _, packing = load_lora_model(cfg, resolved, device, lean_layers=not compiling)
    layers = compiled.Compiled(model) if compiling else None  # as the run compiles them
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    rows = list(prepared.train)
    asked = cfg
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    choice = batch_fit.resolve(cfg, model, rows, tokenizer.pad_token_id, packing, device, started)
    if choice is not None:  # "auto": the batch the run would take here
        cfg = batch_fit.with_batch(cfg, choice.batch)
        t = cfg.train
    startup = time.time() - started - one_off  # a batch's trial steps are start-up, as in a run
    lengths = [len(r["input_ids"]) for r in rows]
    longest = sorted(range(len(rows)), key=lambda i: -lengths[i])[: t.batch_size]
    batch = to_batch(rows, longest, tokenizer.pad_token_id, packing, device)
    model.train()
    autocast = make_autocast(device, t.precision)
    if layers is not None:  # the run's first step compiles the layers: timed apart from a step
        layers.step(
            lambda: timed_step(model, optimizer, batch, autocast, device),
            lambda why: optimizer.zero_grad(set_to_none=True),
        )
    with compiled.eager_if(layers if layers is not None and layers.failed else None):
        micro_s, opt_s, loss, n_real = timed_step(model, optimizer, batch, autocast, device)
    peak = _peak(device)
    # Every micro-batch of a step is timed as the worst one; the optimizer runs once per step.
    per_step = micro_s * t.grad_accum + opt_s
    compile_s = max(layers.first_s - micro_s - opt_s, 0.0) if layers and layers.first_s else 0.0
    total = len(plan_steps(lengths, t.batch_size, t.grad_accum, t.epochs, t.max_steps, t.seed))
    projected = total * per_step
    report = {}
    if t.time_budget_s > 0:
        report["budget"] = budget_report(
            cfg,
            model,
            optimizer,
            prepared,
            tokenizer,
            packing,
            device,
            startup + compile_s,  # a run's budget pays for its first step's compiling too
            record_as=asked,
            layers=layers,
        )
        total, projected = report["budget"]["steps"], t.time_budget_s
    if choice is not None:
        report["batch_auto"] = choice.line
    if layers is not None:  # what compiling cost: the first step's seconds beyond a step's
        kept = {k: v for k, v in compiled.record(layers).items() if k != "step_shapes"}
        report["compile"] = {**kept, "compile_s": compile_s}
    return {
        "device": device,
        "trainable_params": trainable,
        "rows_per_micro_batch": len(longest),
        "tokens_per_micro_batch": n_real,
        "label_tokens": batch[1],
        "loss": float(loss) / max(batch[1], 1),
        "forward_backward_seconds": micro_s,
        "optimizer_seconds": opt_s,
        "seconds_per_step": per_step,
        "total_steps": total,
        "projected_seconds": projected,
        "peak_memory_gib": peak / GIB,
        "memory_added_gib": max(peak - before, 0) / GIB,
        "estimate": estimate_memory(cfg, resolved, label_share(prepared.train)),
        **report,
    }


def warn_if_too_big(cfg: RunConfig, resolved, prepared, emit) -> None:
    """A "warning" event when the memory estimate exceeds the device (training still starts)."""
    try:
        est = estimate_memory(cfg, resolved, label_share=label_share(prepared.train))
    except (
        ValueError,
        OSError,
        RuntimeError,
        AttributeError,
    ) as err:  # unusual configs: no estimate
        emit("status", message=f"memory estimate unavailable: {err}")
        return
    if not est["fits"]:
        emit("warning", message=est["warning"], estimate=est)
