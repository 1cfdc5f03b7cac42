"""Form values <-> RunConfig, and what the hardware lets the form offer. No gradio here."""

from __future__ import annotations

from dataclasses import dataclass

from core.hardware import PRECISIONS, QUANTIZATIONS, Hardware
from core.user_text import quote
from finetune.config import (
    AUTO_BATCH,
    BUDGET_RANGE_S,
    DEFAULT_BATCH,
    RunConfig,
    first_run_defaults,
)
from finetune.preference_defaults import METHOD_DEFAULTS
from ui.views.model_pick import picked_model

DEMO_DATA = "assets/demo_support.jsonl"

# Field order of the Train tab's settings inputs: (section, field).
TRAIN_FIELDS = [
    ("model", "name"),
    ("train", "device"),
    ("train", "precision"),
    ("train", "quantization"),
    ("train", "batch_size"),
    ("train", "grad_accum"),
    ("lora", "r"),
    ("lora", "alpha"),
    ("lora", "dropout"),
    ("lora", "include_mlp"),
    ("lora", "top_layers"),
    ("train", "learning_rate"),
    ("train", "lr_schedule"),
    ("train", "epochs"),
    ("train", "max_steps"),
    ("data", "max_length"),
    ("data", "max_samples"),
    ("data", "val_fraction"),
    ("data", "packing"),
    ("data", "last_turn_only"),
    ("data", "system_prompt"),
    ("train", "eval_every"),
    ("train", "probe_every"),
    ("train", "save_every"),
    ("train", "seed"),
    ("run", "adapter_name"),
    # Several processes or machines (torchrun); checked by finetune.launch like the CLI's flags.
    ("run", "nproc_per_node"),
    ("run", "nnodes"),
    ("run", "node_rank"),
    ("run", "rdzv_endpoint"),
    ("run", "sharding"),
    # Preference tuning (dpo / cpo / orpo) on pairs, on top of a shelf adapter.
    ("train", "method"),
    ("train", "from_adapter"),
    ("train", "beta"),
    # The default way to train: for N minutes (the form shows minutes; 0 = steps / epochs above).
    ("train", "time_budget_s"),
    # Train each row with its best past answers of the training split (0 = off).
    ("data", "with_passages"),
    ("data", "passage_share"),
    # Decoder layers compiled for the training step: auto (on a GPU), on, off.
    ("train", "compile"),
]
_INTS = {
    "batch_size",
    "grad_accum",
    "r",
    "alpha",
    "top_layers",
    "max_steps",
    "max_length",
    "max_samples",
    "eval_every",
    "probe_every",
    "save_every",
    "seed",
    "nproc_per_node",
    "nnodes",
    "node_rank",
    "with_passages",
}
_FLOATS = {"dropout", "learning_rate", "epochs", "val_fraction", "beta", "passage_share"}
_TEXTS = {"system_prompt", "adapter_name", "rdzv_endpoint", "from_adapter"}
_AUTO = {"eval_every", "probe_every", "save_every"}  # blank = auto (a share of the planned steps)
# The names finetune.config.validate gives the settings, where the field's own name differs.
_LABELS = {
    "time_budget_s": "time budget (minutes)",
    "grad_accum": "gradient accumulation",
    "r": "LoRA rank r",
    "alpha": "LoRA alpha",
    "dropout": "LoRA dropout",
    "top_layers": "LoRA top layers",
    "max_samples": "max samples",
    "val_fraction": "validation fraction",
    "eval_every": "validate every N steps",
    "probe_every": "probe every N steps",
    "save_every": "checkpoint every N steps",
    "nproc_per_node": "processes per node",
    "with_passages": "passages per training row",
    "passage_share": "share of training rows shown passages",
}
_AUTO_OR_WHOLE = {"batch_size", "with_passages"}  # "auto" or a whole number
# The Train tab's "past answers per row" choices: (label, DataArgs.with_passages).
PASSAGE_CHOICES = [
    ("auto: 1 where the answers are canned, else 0 (measured on the training split)", "auto"),
    ("0: none", 0),
    *((str(n), n) for n in range(1, 6)),
]
# The Train tab's batch size is a text box: a dropdown taking typed values let Gradio's filter
# pick a listed size for what was typed ("0" and Enter became 1024), so a bad value never
# reached the check that says what is allowed.
BATCH_INFO = (
    f"auto (blank): the largest that fits a GPU, {DEFAULT_BATCH} on the CPU; or rows per "
    "micro-batch, a whole number from 1 to 4096 (e.g. 4, 8, 16)"
)
# The Train tab's methods: (label, TrainArgs.method).
METHOD_CHOICES = [
    ("SFT: learn the answers in the dataset", "sft"),
    ("DPO: prefer chosen over rejected answers (pairs), from an adapter", "dpo"),
    (
        "CPO: DPO's loss without a reference pass (faster; pulls hardest on the pairs still lost)",
        "cpo",
    ),
    ("ORPO: an odds-ratio term beside SFT, no reference copy (cheaper on a CPU)", "orpo"),
]
# The Train tab's sharding choices: (label, RunArgs.sharding).
SHARDING_CHOICES = [
    ("DDP: each process holds the whole model", "ddp"),
    ("FSDP: the model is split across processes (FSDP2)", "fsdp"),
]


def ui_defaults() -> RunConfig:
    """Settings a first-time user can run on any machine: train for 10 minutes, on the demo data."""
    cfg = first_run_defaults()
    cfg.data.path = DEMO_DATA
    return cfg


def method_settings(method: str) -> tuple[float, float, int, int, float, int]:
    """(learning rate, epochs, max steps, batch size, time budget in minutes, past answers per
    row) the Train tab shows for ``method``: SFT's defaults, or a preference method's measured
    learning rate, epochs and batch size, with max steps 0 so that its epochs count (SFT's
    learning rate is far too high for it) and no passages (a preference run trains without
    them). The time budget stays the first run's: a preference run trains its epochs or until
    the budget ends."""
    cfg = ui_defaults()
    t = cfg.train
    if method in METHOD_DEFAULTS:
        d = METHOD_DEFAULTS[method]
        return d.learning_rate, d.epochs, 0, d.batch_size, t.time_budget_s / 60, 0
    return (
        t.learning_rate,
        t.epochs,
        t.max_steps,
        t.batch_size,
        t.time_budget_s / 60,
        cfg.data.with_passages,
    )


def form_values(cfg: RunConfig) -> list:
    """The Train tab's inputs for ``cfg`` (the time budget in minutes)."""
    return [
        cfg.train.time_budget_s / 60
        if (s, f) == ("train", "time_budget_s")
        else getattr(getattr(cfg, s), f)
        for s, f in TRAIN_FIELDS
    ]


def to_config(data_path: str, values: list) -> tuple[RunConfig, list[str]]:
    """Build a RunConfig from form values; returns it with the problems found converting."""
    cfg, problems = ui_defaults(), []
    cfg.data.path = data_path
    for (section, field), value in zip(TRAIN_FIELDS, values, strict=True):
        try:
            value = _convert(field, value)
        except (TypeError, ValueError, OverflowError):
            kind = "text" if field in _TEXTS else "a number"
            kind = "auto or a whole number" if field in _AUTO_OR_WHOLE else kind
            got = "the box is empty" if value is None else f"got {quote(value)}"  # a blank Number
            problems.append(f"{_LABELS.get(field, field.replace('_', ' '))} must be {kind} ({got})")
            continue
        if field == "time_budget_s" and (problem := _budget_problem(value)):
            problems.append(problem)  # said in the form's minutes; the setting stays as it was
            continue
        setattr(getattr(cfg, section), field, value)
    return cfg, problems


def _budget_problem(seconds: float) -> str:
    """The time budget's range in the form's minutes (finetune.config.budget_problems says it
    in seconds, as the CLI's --time-budget takes them); "" when ``seconds`` is in it."""
    lo, hi = BUDGET_RANGE_S
    if seconds == 0 or lo <= seconds <= hi:  # NaN fails both
        return ""
    return (
        f"time budget (minutes) must be 0 (off) or between {lo / 60:g} ({lo} seconds) and "
        f"{hi / 60:g} (7 days) (got {seconds / 60:g})"
    )


def _convert(field: str, value):
    if field == "name" and isinstance(value, str):  # a catalog name typed in full: its model
        return picked_model(value)
    if field == "max_samples":
        return None if value in (None, "", 0) else int(value)
    if field == "beta" and value in (None, "", 0):  # a blank number box sends 0; no beta is 0
        return None
    if field in _AUTO and (value is None or str(value).strip() == ""):  # a blank box: auto
        return None
    if field == "time_budget_s":
        return float(value) * 60
    if field == "batch_size" and (value is None or str(value).strip() == ""):  # blank: auto
        return AUTO_BATCH
    if field in _AUTO_OR_WHOLE and _is_auto(value):
        return "auto"
    if field in _INTS:
        if value is None or float(value) != int(float(value)):
            raise ValueError
        return int(float(value))
    if field in _FLOATS:
        return float(value)
    if field in _TEXTS:
        if value is not None and not isinstance(value, str):
            raise TypeError
        return (value or "").strip() or (None if field == "system_prompt" else "")
    return value


def _is_auto(value) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


@dataclass
class Offer:
    """Options a dropdown may offer, and why the others are off."""

    choices: list[str]
    notes: list[str]


def device_offer(hw: Hardware) -> Offer:
    return Offer(
        ["auto"] + [d.name for d in hw.devices],
        [] if hw.has_cuda else ["No CUDA GPU found: training runs on the CPU."],
    )


def default_precision(hw: Hardware, device: str) -> str:
    """bf16 on Ampere or newer GPUs, fp16 on older ones, fp32 on the CPU (the fastest that
    trains safely; fp32 on a GPU would be the slowest path)."""
    from core.gpu import recommended_precision

    return recommended_precision(hw.device(device))


def option_offer(hw: Hardware, device: str, kind: str) -> Offer:
    """Precisions or quantizations usable on ``device``; the rest explained."""
    dev = hw.device(device)
    names, table = (
        (PRECISIONS, dev.precisions) if kind == "precision" else (QUANTIZATIONS, dev.quantizations)
    )
    choices = [n for n in names if table.get(n) is None]
    notes = [f"{n} is off: {table[n]}" for n in names if table.get(n)]
    notes += [f"{n}: {dev.warnings[n]}" for n in choices if n in dev.warnings]
    return Offer(choices, notes)
