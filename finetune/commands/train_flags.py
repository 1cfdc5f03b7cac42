"""`python -m finetune train`'s flags: readable names, the seed scripts' flags as aliases, each
default shown from :class:`finetune.config.RunConfig`, and the config they build.

Settings come from ``--config FILE`` (JSON/YAML) when given, then any flag overrides it.
"""

from __future__ import annotations

import argparse
import re

from finetune.config import METHODS
from finetune.preference_defaults import METHOD_DEFAULTS

_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def whole_or_auto(text: str) -> int | str:
    """``--with-passages``, ``--batch-size``: a whole number, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number or 'auto', not {text!r}") from None


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``10m``, ``1.5h`` or ``2d`` (``--time-budget``'s type).

    Raises:
        argparse.ArgumentTypeError: not a number with one of those units (argparse names the flag).
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", str(text).lower())
    if not match or match.group(2) not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds or a number with s, m or h (90s, 10m, 1.5h)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


# (flag, aliases, section, field, type, help)
FLAGS = [
    (
        "--model",
        ["--model_name"],
        "model",
        "name",
        str,
        "base model: Hub id, local folder or 'default'",
    ),
    ("--data", ["--dataset"], "data", "path", str, "dataset file, folder or Hub id"),
    ("--max-length", ["--max_length"], "data", "max_length", int, "tokens per example"),
    ("--max-samples", ["--max_samples"], "data", "max_samples", int, "use at most N rows"),
    (
        "--with-passages",
        ["--with_passages"],
        "data",
        "with_passages",
        whole_or_auto,
        "train each row with the N best past answers of the training split in its system message, "
        "its own answer left out (0 = off, up to 5; auto: 1 where the data's answers are canned, "
        "as a measurement of the training split says, else 0)",
    ),
    (
        "--passage-share",
        ["--passage_share"],
        "data",
        "passage_share",
        float,
        "share of the training rows shown those passages (1 = every row), the rest trained "
        "without them",
    ),
    ("--prompt-column", [], "data", "prompt_column", str, "the column holding the prompt"),
    ("--response-column", [], "data", "response_column", str, "the column holding the answer"),
    (
        "--messages-column",
        [],
        "data",
        "messages_column",
        str,
        "a column of chat messages lists (role, content), instead of prompt and answer",
    ),
    ("--val-fraction", [], "data", "val_fraction", float, "share of rows held out"),
    ("--system-prompt", [], "data", "system_prompt", str, "system message before every prompt"),
    ("--epochs", ["--num_epochs"], "train", "epochs", float, "passes over the data"),
    (
        "--max-steps",
        ["--max_steps"],
        "train",
        "max_steps",
        int,
        "stop after N optimizer steps (0 = use --epochs)",
    ),
    (
        "--time-budget",
        ["--time_budget"],
        "train",
        "time_budget_s",
        parse_duration,
        "train for this long, from start to saved adapter: 90s, 10m, 1.5h or seconds (sft: "
        "overrides epochs and max steps; dpo / cpo / orpo: their epochs or the budget, whichever "
        "ends first; 0 = off). A budget the speeds last measured for these settings (--dry-run, "
        "or an earlier run) fill with fewer than 30 steps is refused, with the figures",
    ),
    (
        "--batch-size",
        ["--batch_size"],
        "train",
        "batch_size",
        whole_or_auto,
        "rows per micro-batch, or auto: on a CUDA GPU the largest that fits and trains faster, "
        "found by trial steps at setup (8 on the CPU)",
    ),
    (
        "--grad-accum",
        ["--gradient_accumulation_steps"],
        "train",
        "grad_accum",
        int,
        "micro-batches per step",
    ),
    ("--lr", ["--learning_rate"], "train", "learning_rate", float, "peak learning rate"),
    ("--device", [], "train", "device", str, "cpu, cuda, cuda:N or auto"),
    ("--precision", [], "train", "precision", str, "fp32, fp16 or bf16"),
    ("--quantization", [], "train", "quantization", str, "none, 8bit or 4bit"),
    (
        "--compile",
        [],
        "train",
        "compile",
        str,
        "compile each decoder layer once for the training step: on, off or auto (on a CUDA GPU "
        "for an unquantized base without FSDP)",
    ),
    ("--eval-every", [], "train", "eval_every", int, "steps between validation passes"),
    ("--probe-every", [], "train", "probe_every", int, "steps between probe answers"),
    ("--save-every", [], "train", "save_every", int, "steps between checkpoints"),
    ("--seed", [], "train", "seed", int, "random seed"),
    ("--lora-r", ["--lora_r"], "lora", "r", int, "LoRA rank"),
    ("--lora-alpha", ["--lora_alpha"], "lora", "alpha", int, "LoRA alpha"),
    ("--lora-dropout", ["--lora_dropout"], "lora", "dropout", float, "LoRA dropout"),
    (
        "--lora-top-layers",
        [],
        "lora",
        "top_layers",
        int,
        "adapt only the last N transformer blocks (0 = all): faster steps, backward stops below "
        "them",
    ),
    ("--name", ["--adapter-name"], "run", "adapter_name", str, "adapter name on the shelf"),
    ("--run-dir", [], "run", "run_dir", str, "run folder (events, checkpoints)"),
    (
        "--nproc-per-node",
        ["--nproc_per_node"],
        "run",
        "nproc_per_node",
        int,
        "processes per machine (torchrun)",
    ),
    ("--nnodes", [], "run", "nnodes", int, "machines in the run (each runs this same command)"),
    ("--node-rank", ["--node_rank"], "run", "node_rank", int, "this machine's rank, 0 .. nnodes-1"),
    ("--rdzv-endpoint", ["--rdzv_endpoint"], "run", "rdzv_endpoint", str, "host:port of node 0"),
    (
        "--sharding",
        [],
        "run",
        "sharding",
        str,
        "ddp (whole model per process) or fsdp (FSDP2 shards it)",
    ),
]


# What an unset field means, where its value (None or "") does not say it.
UNSET_MEANS = {
    "max_samples": "every row",
    "system_prompt": "none",
    "eval_every": "auto, at a quarter, half and three quarters of the planned steps",
    "probe_every": "auto, as --eval-every",
    "save_every": "auto, as --eval-every",
    "adapter_name": "made from the start time",
    "run_dir": "$TUNEDESK_HOME/runs/<run id>",
    "rdzv_endpoint": "none, one machine",
    "prompt_column": "found by its name (instruction, prompt, question, input ...)",
    "response_column": "found by its name (response, completion, answer, output ...)",
    "messages_column": "a column named messages or conversations, if any",
}


def default_help(section: str, field: str) -> str:
    """``(default: ...)`` for one flag, from :class:`finetune.config.RunConfig`'s own value:
    the flags default to None so that a ``--config`` file's values are kept."""
    from finetune.config import RunConfig

    value = getattr(getattr(RunConfig(), section), field)
    shown = UNSET_MEANS[field] if value is None or value == "" else _shown(value)
    if field in ("learning_rate", "epochs", "batch_size"):  # the preference methods' own
        shown = f"sft {shown}, " + per_method(field)
    return f"(default: {shown})".replace("%", "%%")


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def per_method(field: str, methods=tuple(METHOD_DEFAULTS)) -> str:
    """Each preference method's own default of ``field``: ``dpo 0.05, cpo 0.05, orpo 0.02``."""
    return ", ".join(f"{m} {_shown(getattr(METHOD_DEFAULTS[m], field))}" for m in methods)


def add_flag(p, flag: str, dest: str | None = None) -> None:
    """Add one of :data:`FLAGS` to parser ``p`` as train has it (type, aliases, help, default
    None); ``dest`` names its attribute (default ``SECTION__FIELD``, what :func:`build_config`
    reads). ``python -m eval`` takes ``--prompt-column`` and ``--response-column`` so."""
    _, aliases, section, field, typ, help_text = next(f for f in FLAGS if f[0] == flag)
    p.add_argument(
        flag,
        *aliases,
        dest=dest or f"{section}__{field}",
        type=typ,
        default=None,
        metavar=flag[2:].upper().replace("-", "_"),
        help=f"{help_text} {default_help(section, field)}",
    )


def add_arguments(p) -> None:
    p.add_argument("--config", help="JSON or YAML run config; flags override it")
    for flag, *_ in FLAGS:
        add_flag(p, flag)
    p.add_argument(
        "--use_8bit", "--use-8bit", action="store_true", help="alias for --quantization 8bit"
    )
    p.add_argument(
        "--use_4bit", "--use-4bit", action="store_true", help="alias for --quantization 4bit"
    )
    p.add_argument("--fp16", action="store_true", help="alias for --precision fp16")
    p.add_argument("--bf16", action="store_true", help="alias for --precision bf16")
    p.add_argument("--no-packing", action="store_true", help="pad batches instead of packing rows")
    p.add_argument(
        "--last-turn-only",
        action="store_true",
        help="in conversations, train only the final assistant answer",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint in --run-dir"
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run Python code shipped with this model (its auto_map); off unless given",
    )
    p.add_argument(
        "--output-dir", "--output_dir", help="also copy the finished adapter folder here"
    )
    p.add_argument("--events", help="append progress events as JSON lines to this file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--dry-run",
        "--dry_run",
        action="store_true",
        help=(
            "print the memory estimate and one timed step as JSON, then exit (writes nothing "
            "but, under "
            "a time budget, the speeds it measured, for the next check of these settings)"
        ),
    )
    p.add_argument(
        "--method",
        dest="train__method",
        choices=list(METHODS),
        default=None,
        help=(
            "sft: supervised (default); dpo / cpo / orpo: preference pairs from --data "
            "(prompt, chosen, "
            "rejected; `python -m feedback export` writes them) on top of --from-adapter"
        ),
    )
    p.add_argument(
        "--from-adapter",
        dest="train__from_adapter",
        metavar="NAME",
        help="the shelf adapter a dpo / cpo / orpo run starts from",
    )
    p.add_argument(
        "--beta",
        dest="train__beta",
        type=float,
        default=None,
        metavar="BETA",
        help=f"dpo / cpo / orpo: strength of the preference term (default: {per_method('beta')})",
    )
    p.add_argument(
        "--sft-weight",
        type=float,
        default=None,
        help="dpo / cpo: weight of the SFT term on the chosen answers beside the "
        f"preference loss (default: {per_method('sft_weight', ('dpo', 'cpo'))})",
    )


def build_config(args):
    from finetune.config import RunConfig

    cfg = RunConfig.load(args.config) if args.config else RunConfig()
    for section, field in [(f[2], f[3]) for f in FLAGS] + [
        ("train", "method"),
        ("train", "from_adapter"),
        ("train", "beta"),
    ]:
        value = getattr(args, f"{section}__{field}", None)
        if value is not None:
            setattr(getattr(cfg, section), field, value)
    if args.use_8bit or args.use_4bit:
        cfg.train.quantization = "4bit" if args.use_4bit else "8bit"
    if args.fp16 or args.bf16:
        cfg.train.precision = "bf16" if args.bf16 else "fp16"
    if args.no_packing:
        cfg.data.packing = False
    if args.last_turn_only:
        cfg.data.last_turn_only = True
    if args.resume:
        cfg.run.resume = True
    if args.trust_remote_code:
        cfg.model.trust_remote_code = True
    return cfg
