"""Run configuration: small dataclasses, one docstring line per field, no torch import.

``validate(cfg, hardware)`` returns every problem at once, in words a person can act on.
Configs round-trip through JSON and YAML (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from core.hardware import PRECISIONS, QUANTIZATIONS
from core.user_text import quote
from finetune.launch import launch_problems


@dataclass
class ModelArgs:
    """Which base model, and how to load it."""

    name: str = "HuggingFaceTB/SmolLM2-135M-Instruct"  # Hub id, local folder, or "default"
    trust_remote_code: bool = False  # run code shipped with the model; off unless asked for


@dataclass
class LoraArgs:
    """LoRA adapter shape."""

    r: int = 16  # rank of the low-rank update
    alpha: int = 32  # scaling numerator (scale = alpha / r)
    # 0: PEFT then feeds each adapted layer's input straight to LoRA instead of keeping a
    # dropped-out copy for backward (0.9 GiB less at batch 8 x 128 on the default model).
    dropout: float = 0.0  # dropout on the LoRA input
    target_modules: str | list[str] = "auto"  # "auto" picks per architecture, or a list of names
    include_mlp: bool = True  # with "auto" on llama-style models, also adapt gate/up/down
    # Adapt only the last N transformer blocks (0: all). Backward then stops below them: the
    # default model with its last 15 of 30 blocks trained 209 tokens/s against 162 with all (a
    # 10-minute run at max length 128, 2 AVX2 cores), at the same quality per minute
    # (docs/benchmarks.md, the support checks' section).
    top_layers: int = 0


@dataclass
class DataArgs:
    """Which rows to train on and how to turn them into tokens."""

    path: str = "assets/demo_support.jsonl"  # file, save_to_disk folder, or Hub dataset id
    prompt_column: str | None = None  # override the auto-detected prompt column
    response_column: str | None = None  # override the auto-detected response column
    messages_column: str | None = None  # override: a column of chat `messages` lists
    system_prompt: str | None = None  # optional system message put before every prompt
    max_length: int = 256  # tokens per example (prompt + response + end-of-turn)
    truncation: str = "truncate_response"  # "truncate_response" or "drop" over-long rows
    # Conversations train every assistant turn; True labels only the final answer (the earlier
    # turns are context). Over-long conversations lose their oldest exchanges either way.
    last_turn_only: bool = False
    # Train each row with the best N past answers of the training split in its system message
    # (the row's own answer left out), built as grounded serving builds it (0: none; up to 5);
    # "auto": 1 or 0, as a measurement of the training split decides (finetune/data/passages.py).
    with_passages: int | str = 0
    # Share of the training rows shown those passages (1.0: every row); the rest train on the
    # question alone, so the adapter learns both to use passages and to answer without them.
    # Which rows is fixed by the seed and the row. Validation rows are all shown them, as served.
    passage_share: float = 1.0
    val_fraction: float = 0.05  # share of rows held out for validation
    max_samples: int | None = None  # use at most this many rows (after shuffling)
    # Padding-free packed rows. Off by default: on CPU, transformers masks packed rows with a
    # dense (T x T) block mask, so attention and memory grow with the whole pack; length-grouped
    # padded batches measured faster here (docs/benchmarks.md). On GPUs with flash attention
    # (varlen) packing pays.
    packing: bool = False
    seed: int = 42  # shuffling and split seed


@dataclass
class TrainArgs:
    """Optimisation and hardware settings."""

    device: str = "auto"  # cpu, cuda, cuda:N, or auto
    precision: str = "fp32"  # fp32, fp16 or bf16
    quantization: str = "none"  # none, 8bit or 4bit (NF4, double quantization)
    # Rows per micro-batch, or "auto": on a CUDA GPU the largest that fits and is worth it, found
    # by trial steps at setup; DEFAULT_BATCH on the CPU, or down to 4 where a time budget would
    # buy too few steps at the speeds this machine measured (finetune/train/batch_fit.py).
    batch_size: int | str = "auto"
    grad_accum: int = 1  # micro-batches per optimizer step
    # Peak learning rate. 1e-3 halved Bitext v1 validation perplexity in ~10 CPU minutes where
    # 2e-4 fell short (docs/benchmarks.md, "Training defaults").
    learning_rate: float = 1e-3
    lr_schedule: str = "cosine"  # cosine, linear or constant
    warmup_ratio: float = 0.03  # share of steps spent warming up
    epochs: float = 1.0  # passes over the training rows (ignored when max_steps > 0)
    max_steps: int = 0  # stop after this many optimizer steps (0 = use epochs)
    # Train for this many seconds, from the run's start (the CLI's process start) to the saved
    # adapter (0 = off): overrides epochs and max_steps; the run times its first steps and sizes
    # its plan to end on time (finetune/train/budget.py). A preference run (dpo / cpo / orpo)
    # trains its epochs or until the budget ends, whichever is first (preference_budget.py).
    time_budget_s: float = 0.0
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping
    gradient_checkpointing: bool = False  # trade compute for activation memory
    # Compile each decoder layer once for the training step (finetune/train/compiled.py): on,
    # off, or auto (on a CUDA GPU for an unquantized base without FSDP; off on the CPU).
    compile: str = "auto"
    optimizer: str = "adamw"  # adamw or paged_adamw_8bit (bitsandbytes + CUDA)
    # None = auto: at a quarter, half and three quarters of the planned steps (plans under 8
    # steps: at the end only; finetune/train/budget.py Cadence).
    eval_every: int | None = None  # optimizer steps between validation passes (0 = only at the end)
    probe_every: int | None = None  # optimizer steps between probe answers (0 = only at the end)
    save_every: int | None = None  # optimizer steps between checkpoints (0 = none)
    log_every: int = 5  # optimizer steps between progress events
    seed: int = 42  # weights init and data order
    cpu_threads: int = 0  # torch threads on CPU (0 = number of physical cores)
    # sft (supervised), or preference tuning on (prompt, chosen, rejected) pairs in data.path,
    # on top of the shelf adapter from_adapter: dpo or orpo (finetune/train/preference.py)
    method: str = "sft"
    from_adapter: str = ""
    # dpo / cpo / orpo: strength of the preference term; None: the method's measured default
    # (finetune.preference_defaults.METHOD_DEFAULTS: DPO and CPO 0.05, ORPO 0.02)
    beta: float | None = None


@dataclass
class RunArgs:
    """Where the result goes."""

    adapter_name: str = ""  # name on the adapter shelf (empty = derived from time)
    run_dir: str = ""  # run folder (empty = $TUNEDESK_HOME/runs/<run_id>)
    resume: bool = False  # continue from the last checkpoint in run_dir
    nproc_per_node: int = 1  # >1 runs under torchrun (DDP or FSDP)
    nnodes: int = 1  # machines in one run; >1 needs rdzv_endpoint and node_rank
    node_rank: int = 0  # this machine's place, 0 .. nnodes-1 (node 0 hosts the rendezvous)
    rdzv_endpoint: str = ""  # host:port of node 0, reachable from every node
    # ddp: every process holds the whole model; fsdp: torch's FSDP2 shards the base and the
    # LoRA weights across processes, for bases that do not fit one GPU (finetune/launch.py says
    # what it does not combine with).
    sharding: str = "ddp"


@dataclass
class RunConfig:
    """Everything one training run needs."""

    model: ModelArgs = field(default_factory=ModelArgs)
    lora: LoraArgs = field(default_factory=LoraArgs)
    data: DataArgs = field(default_factory=DataArgs)
    train: TrainArgs = field(default_factory=TrainArgs)
    run: RunArgs = field(default_factory=RunArgs)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """Build from a (possibly partial) dict; unknown keys are an error that names them."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a run config must be a mapping of sections (got {type(d).__name__})")
        parts = {}
        for f in fields(cls):
            sub_cls = {
                "model": ModelArgs,
                "lora": LoraArgs,
                "data": DataArgs,
                "train": TrainArgs,
                "run": RunArgs,
            }[f.name]
            section = d.get(f.name) or {}
            if not isinstance(section, Mapping):
                raise ValueError(
                    f"config section {f.name!r} must be a mapping of settings "
                    f"(got {type(section).__name__})"
                )
            values = dict(section)
            known = {x.name for x in fields(sub_cls)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise ValueError(f"unknown {f.name} setting(s): {', '.join(unknown)}")
            parts[f.name] = sub_cls(**values)
        extra = sorted(set(d) - {f.name for f in fields(cls)})
        if extra:
            raise ValueError(f"unknown config section(s): {', '.join(extra)}")
        return cls(**parts)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        text = (
            _yaml_dump(self.to_dict())
            if path.suffix in (".yaml", ".yml")
            else json.dumps(self.to_dict(), indent=2)
        )
        path.write_text(text)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text) or {}
            else:
                data = json.loads(text)
        except FileNotFoundError:
            raise FileNotFoundError(f"run config {path} does not exist") from None
        except IsADirectoryError:
            raise ValueError(f"run config {path} is a folder; name a JSON or YAML file") from None
        except Exception as err:  # not UTF-8, yaml.YAMLError, JSONDecodeError, RecursionError
            raise ValueError(
                f"{path.name} is not a readable run config: "
                f"{' '.join(str(err).split())[:200] or type(err).__name__}"
            ) from None
        return cls.from_dict(data)


def first_run_defaults() -> RunConfig:
    """The settings a first-time user can run on any machine (the Train tab's, less its data):
    train for 10 minutes; the run sizes its steps, schedule and validation passes to end within
    the budget (finetune/train/budget.py), on a 2-core CPU or a GPU alike, in the precision that
    trains fastest here (``core.gpu.recommended_precision``: bf16 on a CPU only where measured
    clearly faster)."""
    from core.gpu import recommended_precision
    from core.hardware import detect

    cfg = RunConfig()
    device = detect().device(cfg.train.device)
    cfg.train.precision = recommended_precision(device)
    cfg.train.time_budget_s = 600
    # On a CPU, about one pass over the rows the budget buys on 2 cores: 10 minutes on Bitext
    # bought 107 steps of 8 on 950 rows; on 380 rows the adapter saw them 2.3 times and answered
    # short (BLEU 13.7). A GPU takes every row: its 10 minutes pass over a few thousand rows
    # many times at the speeds measured there (docs/benchmarks.md, "GPU"). lr 2e-3 (the CLI:
    # 1e-3) won `python -m bench budget-sweep` and, held out, scored perplexity 2.53, BLEU 24.1,
    # ROUGE-L 0.384 against 2.68, 22.1, 0.372 at 1e-3 (docs/benchmarks.md).
    cfg.data.max_samples = None if device.name.startswith("cuda") else 1000
    # One past answer in half the rows where the data's answers are canned (each row's best past
    # answer says most of it), none where they are written anew: each won on the data it suits
    # (docs/benchmarks.md, "Grounded answers on Bitext, trained with and without passages").
    cfg.data.with_passages, cfg.data.passage_share = "auto", 0.5
    cfg.train.learning_rate = 2e-3
    # With the budget at 0: 30 steps took 7 min on 2 cores (docs/benchmarks.md).
    cfg.train.max_steps = 30
    cfg.train.eval_every = cfg.train.probe_every = cfg.train.save_every = None  # auto
    cfg.train.log_every = 2
    return cfg


def _yaml_dump(d: dict) -> str:
    import yaml

    return yaml.safe_dump(d, sort_keys=False)


def _range(out: list, label: str, value, lo, hi, whole: bool = False) -> None:
    """Add a problem unless ``value`` is a number (a whole one when ``whole``) in [lo, hi]."""
    number = isinstance(value, int) if whole else isinstance(value, (int, float))
    if not number or isinstance(value, bool) or not (lo <= value <= hi):  # NaN fails lo <= value
        kind = "a whole number" if whole else "a number"
        out.append(f"{label} must be {kind} between {lo} and {hi} (got {value!r})")


# Settings checked for type only (the rest have ranges or fixed choices below).
_TEXT, _OPTIONAL_TEXT, _FLAG = (str,), (str, type(None)), (bool,)
_TYPED = [
    ("model", "name", _TEXT),
    ("model", "trust_remote_code", _FLAG),
    ("lora", "include_mlp", _FLAG),
    ("data", "path", _TEXT),
    ("data", "prompt_column", _OPTIONAL_TEXT),
    ("data", "response_column", _OPTIONAL_TEXT),
    ("data", "messages_column", _OPTIONAL_TEXT),
    ("data", "system_prompt", _OPTIONAL_TEXT),
    ("data", "packing", _FLAG),
    ("data", "last_turn_only", _FLAG),
    ("train", "device", _TEXT),
    ("train", "gradient_checkpointing", _FLAG),
    ("run", "adapter_name", _TEXT),
    ("run", "run_dir", _TEXT),
    ("run", "resume", _FLAG),
    ("run", "rdzv_endpoint", _TEXT),
]


def _type_problems(cfg: RunConfig) -> list[str]:
    out = []
    for section, name, types in _TYPED:
        value = getattr(getattr(cfg, section), name)
        if not isinstance(value, types):
            kind = "true or false" if types is _FLAG else "text"
            out.append(f"{section} setting {name} must be {kind} (got {quote(value)})")
    return out


AUTO_BATCH = "auto"
DEFAULT_BATCH = 8  # rows per micro-batch "auto" trains on where it is not measured (the CPU)
COMPILE_SETTINGS = ("auto", "on", "off")  # finetune/train/compiled.py


def micro_batch(t: TrainArgs) -> int:
    """Rows per micro-batch as far as known before the run resolves ``auto`` (estimates, the
    dry run's plan on the CPU): the number set, or ``DEFAULT_BATCH``."""
    return DEFAULT_BATCH if t.batch_size == AUTO_BATCH else t.batch_size


PREFERENCE_METHODS = ("dpo", "cpo", "orpo")  # finetune/train/preference.py trains these
METHODS = ("sft", *PREFERENCE_METHODS)


def validate(cfg: RunConfig, hardware=None) -> list[str]:
    """Every problem with ``cfg`` (empty list when it can run here).

    Never raises, whatever the values hold (a config file or a form may hold anything).

    Args:
        cfg: the run configuration.
        hardware: a ``core.hardware.Hardware``; when given, device/precision/quantization
            are checked against this machine.
    """
    out = _type_problems(cfg)
    if isinstance(cfg.model.name, str) and not cfg.model.name.strip():
        out.append("model name is empty: give a Hub id, a local folder, or 'default'")
    out += _train_problems(cfg.train) + _lora_problems(cfg.lora) + _data_problems(cfg.data)
    if cfg.run.adapter_name:
        from core.paths import safe_name

        try:
            safe_name(cfg.run.adapter_name, "adapter name")
        except ValueError as err:
            out.append(str(err))
    t = cfg.train
    if cfg.data.with_passages and t.method in PREFERENCE_METHODS:
        out.append(
            f"training with passages is for sft; {t.method} trains on pairs without them "
            "(set passages per training row to 0)"
        )
    out += launch_problems(cfg.run, t, hardware)
    if isinstance(cfg.run.run_dir, str) and cfg.run.run_dir and Path(cfg.run.run_dir).is_file():
        out.append(f"the run folder {quote(cfg.run.run_dir)} is a file; name a folder")
    if cfg.run.resume is True and not cfg.run.run_dir:
        out.append(
            "resume continues a run's folder: name it (--run-dir; the runs are the folders "
            "in $TUNEDESK_HOME/runs)"
        )
    elif (
        cfg.run.resume is True
        and isinstance(cfg.run.run_dir, str)
        and cfg.run.node_rank == 0  # another machine of the run may not see node 0's folder
        and os.environ.get("RANK", "0") == "0"  # the other ranks follow rank 0's folder
        and not Path(cfg.run.run_dir).exists()
    ):
        out.append(
            f"there is no run folder {quote(cfg.run.run_dir)} to resume: name one of the "
            "folders in $TUNEDESK_HOME/runs, or leave out resume to start a new run"
        )
    known = t.precision in PRECISIONS and t.quantization in QUANTIZATIONS
    if hardware is not None and known and isinstance(t.device, str):
        out.extend(hardware.problems(t.device, t.precision, t.quantization))
        if t.optimizer == "paged_adamw_8bit" and not (hardware.has_cuda and hardware.bitsandbytes):
            out.append("paged 8-bit AdamW needs bitsandbytes and a CUDA GPU; use adamw here")
        if t.quantization != "none" and t.precision == "fp16" and not hardware.has_cuda:
            out.append("fp16 compute for quantized layers needs a CUDA GPU")
    return out


def _train_problems(t: TrainArgs) -> list[str]:
    out: list[str] = []
    if t.precision not in PRECISIONS:
        out.append(f"precision must be one of {', '.join(PRECISIONS)} (got {t.precision!r})")
    if t.quantization not in QUANTIZATIONS:
        out.append(
            f"quantization must be one of {', '.join(QUANTIZATIONS)} (got {t.quantization!r})"
        )
    if t.batch_size != AUTO_BATCH:
        _range(out, "batch size", t.batch_size, 1, 4096, whole=True)
        if out and out[-1].startswith("batch size"):
            out[-1] = out[-1].replace(" (got", ", or auto (got", 1)
    _range(out, "gradient accumulation", t.grad_accum, 1, 4096, whole=True)
    _range(out, "learning rate", t.learning_rate, 1e-7, 1.0)
    _range(out, "warmup ratio", t.warmup_ratio, 0.0, 0.5)
    _range(out, "epochs", t.epochs, 0.0, 100.0)
    _range(out, "max steps", t.max_steps, 0, 10_000_000, whole=True)
    _range(out, "weight decay", t.weight_decay, 0.0, 10.0)
    _range(out, "max grad norm", t.max_grad_norm, 0.0, 1e6)
    for label, value in (
        ("validate every", t.eval_every),
        ("probe every", t.probe_every),
        ("checkpoint every", t.save_every),
    ):
        if value is not None:  # None: auto
            _range(out, f"{label} N steps", value, 0, 10_000_000, whole=True)
    out += budget_problems(t.time_budget_s)
    _range(out, "log every N steps", t.log_every, 1, 10_000_000, whole=True)
    _range(out, "seed", t.seed, 0, 2**32 - 1, whole=True)
    _range(out, "CPU threads", t.cpu_threads, 0, 1024, whole=True)
    if t.max_steps == 0 and isinstance(t.epochs, (int, float)) and t.epochs <= 0:
        if (
            t.method in PREFERENCE_METHODS
        ):  # a budget ends a preference run's epochs early, never later
            out.append(
                f"set epochs above 0 or max steps above 0: {t.method} trains for them (a time "
                "budget can only end it sooner)"
            )
        elif not t.time_budget_s:
            out.append("set epochs above 0 or max steps above 0: otherwise nothing trains")
    if t.lr_schedule not in ("cosine", "linear", "constant"):
        out.append(
            f"learning-rate schedule must be cosine, linear or constant (got {t.lr_schedule!r})"
        )
    if t.method not in METHODS:
        out.append(f"method must be one of {', '.join(METHODS)} (got {t.method!r})")
    elif t.method != "sft" and not (isinstance(t.from_adapter, str) and t.from_adapter.strip()):
        out.append(
            f"{t.method} trains an adapter further: name the adapter to start from (--from-adapter)"
        )

    if t.beta is not None:
        _range(out, "beta", t.beta, 1e-4, 100.0)
    if t.compile not in COMPILE_SETTINGS:
        out.append(f"compile must be one of {', '.join(COMPILE_SETTINGS)} (got {quote(t.compile)})")
    if t.optimizer not in ("adamw", "paged_adamw_8bit"):
        out.append(f"optimizer must be adamw or paged_adamw_8bit (got {t.optimizer!r})")
    return out


BUDGET_RANGE_S = (30, 7 * 24 * 3600)  # a time budget: from 30 seconds to 7 days


def budget_problems(seconds) -> list[str]:
    """What is wrong with a time budget of ``seconds`` ([] when nothing): 0 (off) or in range."""
    lo, hi = BUDGET_RANGE_S
    if (
        not isinstance(seconds, (int, float))
        or isinstance(seconds, bool)
        or not (seconds == 0 or lo <= seconds <= hi)
    ):
        return [
            f"time budget must be 0 (off) or between {lo} seconds and 7 days ({hi} s) (got "
            f"{quote(seconds)})"
        ]
    return []


def _lora_problems(lo: LoraArgs) -> list[str]:
    out: list[str] = []
    _range(out, "LoRA rank r", lo.r, 1, 1024, whole=True)
    _range(out, "LoRA alpha", lo.alpha, 1, 4096, whole=True)
    _range(out, "LoRA dropout", lo.dropout, 0.0, 0.9)
    _range(out, "LoRA top layers", lo.top_layers, 0, 10_000, whole=True)
    if not (
        lo.target_modules == "auto"
        or (
            isinstance(lo.target_modules, list)
            and lo.target_modules
            and all(isinstance(m, str) and m for m in lo.target_modules)
        )
    ):
        out.append("LoRA target modules must be 'auto' or a non-empty list of module names")
    return out


def _data_problems(d: DataArgs) -> list[str]:
    out: list[str] = []
    _range(out, "max length", d.max_length, 16, 32768, whole=True)
    _range(out, "validation fraction", d.val_fraction, 0.0, 0.5)
    if d.with_passages != "auto":
        _range(out, "passages per training row", d.with_passages, 0, 5, whole=True)
    _range(out, "share of training rows shown passages", d.passage_share, 0.0, 1.0)
    _range(out, "data seed", d.seed, 0, 2**32 - 1, whole=True)
    if d.max_samples is not None:
        _range(out, "max samples", d.max_samples, 2, 100_000_000, whole=True)
    if d.truncation not in ("truncate_response", "drop"):
        out.append(f"truncation must be 'truncate_response' or 'drop' (got {d.truncation!r})")
    if isinstance(d.path, str) and not d.path.strip():
        out.append("dataset path is empty: choose the demo data, upload a file, or give a path")
    return out
