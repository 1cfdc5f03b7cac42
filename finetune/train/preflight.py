"""The checks a run must pass before it starts: one list of sentences for Check and Start.

:func:`finetune.config.validate` looks at the settings alone. A run also needs a dataset it
can read (a known file type, UTF-8, the columns it knows, no broken field) and a base model
it can resolve. Without these checks a run starts, fails seconds later in its child process
and leaves its reason in a log; with them the user reads the reason before anything starts.
"""

from __future__ import annotations

from pathlib import Path

from core.user_text import quote


def preflight(cfg, hardware=None) -> list[str]:
    """Every reason ``cfg`` cannot start here (empty when it can).

    Args:
        cfg: a ``finetune.config.RunConfig``.
        hardware: a ``core.hardware.Hardware`` to check device and precision against.

    Returns:
        The problems of :func:`finetune.config.validate`, then the dataset's, then the base
        model's, then (when none) a time budget's that buys too few steps at the speeds last
        measured for these settings (``finetune.train.speed_record``), each one sentence. Never
        raises for bad input.
    """
    from finetune.config import PREFERENCE_METHODS, validate

    problems = validate(cfg, hardware)
    path, model = cfg.data.path, cfg.model.name
    preference = getattr(cfg.train, "method", "sft") in PREFERENCE_METHODS
    if isinstance(path, (str, Path)) and str(path).strip():
        problems += pairs_problems(path) if preference else dataset_problems(cfg.data)
    if preference and not problems:
        problems += adapter_problems(cfg.train.from_adapter)
    if isinstance(model, str) and model.strip():
        problems += model_problems(model)
    if not problems:  # a time budget too short for a useful run, from the last measured speeds
        from finetune.train.speed_record import budget_problems

        problems += budget_problems(cfg)
    return problems


def dataset_problems(data_args) -> list[str]:
    """Why the dataset of ``data_args`` cannot be trained on: unreadable, unknown columns,
    a field too long, or no usable row. The same loader, mapping and row checks as training."""
    from finetune.data.load import DataError, load_rows
    from finetune.data.rows import detect_mapping, normalize

    source = Path(str(data_args.path)).name or str(data_args.path)
    try:
        table = load_rows(data_args.path)  # its sentences name the file already
    except (ValueError, OSError) as err:  # DataError, or a parser's own error let through
        return [str(err)]
    try:
        normalize(table, detect_mapping(table.column_names, data_args), source)
    except DataError as err:  # as finetune.data.prepare says it
        return [str(err) if str(err).startswith(source) else f"{source}: {err}"]
    return []


def pairs_problems(path) -> list[str]:
    """Why a preference run cannot read its pairs file (prompt, chosen, rejected), or nothing."""
    from finetune.train.preference import read_pairs

    try:
        read_pairs(path)
    except ValueError as err:
        return [str(err)]
    return []


def adapter_problems(name: str) -> list[str]:
    """Why shelf adapter ``name`` cannot start a preference run (missing, broken), or nothing."""
    from adapters.shelf.adapter_folder import read_adapter_folder
    from core import paths

    try:
        read_adapter_folder(name, paths.subdir("adapters") / paths.safe_name(name, "adapter name"))
    except ValueError as err:
        return [str(err)]
    return []


def model_problems(name: str) -> list[str]:
    """Why base model ``name`` cannot be resolved (the resolver's own sentence), or nothing."""
    from core.models import resolve

    try:
        resolve(name)
    except ValueError as err:
        return [str(err)]
    except OSError as err:  # the model cache cannot take the converted copy (read-only, full)
        where = f" ({err.filename})" if err.filename else ""
        return [f"could not prepare base model {quote(name)}: {err.strerror or err}{where}"]
    return []
