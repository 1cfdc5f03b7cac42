"""What the Train tab's controls do, as plain functions (no gradio): ui/tabs/train.py wires them.

Each function takes the form's values and returns what the tab shows (text, a table, a run
id); the tab wraps the results in Gradio updates. Bad input comes back as one sentence.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from core import paths
from core.user_text import quote, shown_error
from finetune.config import PREFERENCE_METHODS
from finetune.train import runner
from finetune.train.preflight import preflight
from ui.views import forms
from ui.views.train_progress import latest_run_id, run_view
from ui.views.uploads import PAIR_COLUMNS, holds_pairs, preview, store_upload, typed_path
from ui.views.wording import as_markdown, for_ui

DATA_SOURCES = ["Demo data (assets)", "Upload a file", "Path on this machine"]


def dataset_path(src: str, upload_file, typed: str | None) -> str:
    """The dataset the form names: the demo file, a stored upload, or a typed path.

    Raises:
        ValueError: the chosen source has no file yet.
    """
    if src == DATA_SOURCES[0]:
        return forms.DEMO_DATA
    if src == DATA_SOURCES[1]:
        if not upload_file:
            raise ValueError("choose a file to upload first")
        return store_upload(upload_file)
    if not (typed or "").strip():
        raise ValueError("type a dataset path first")
    return str(paths.readable(typed_path(typed), "the dataset path"))


def data_preview(src: str, upload_file, typed: str | None) -> tuple[str, pd.DataFrame | None]:
    """The dataset's summary line and first rows, or a warning and no table."""
    try:
        values, cols, info = preview(dataset_path(src, upload_file, typed))
    except (ValueError, OSError) as err:
        return f"⚠️ {as_markdown(for_ui(shown_error(err)))}", None
    return info, pd.DataFrame(values, columns=cols)


def device_options(hw, device_notes: list[str], device: str) -> tuple[list, str, list, str]:
    """For ``device``: precision choices and default, quantization choices, and the notes on
    what is off and why."""
    p, q = (
        forms.option_offer(hw, device, "precision"),
        forms.option_offer(hw, device, "quantization"),
    )
    notes = "\n".join(f"- {n}" for n in device_notes + p.notes + q.notes)
    return p.choices, forms.default_precision(hw, device), q.choices, notes


def build_config(hw, src: str, upload_file, typed: str | None, values) -> tuple:
    """The ``RunConfig`` the form describes, and every problem with it (empty: it can run)."""
    data = dataset_path(src, upload_file, typed)
    cfg, problems = forms.to_config(data, list(values))
    # Check and Start run the same checks: settings, a readable dataset with known columns,
    # a base model that resolves. Start refuses before any run starts.
    problems += preflight(cfg, hw)
    if cfg.train.method == "sft" and holds_pairs(Path(data)):
        problems = _pairs_for_sft(cfg.data, problems)
    if not problems and cfg.train.method in PREFERENCE_METHODS:
        problems += _taken_name(cfg)
    if src == DATA_SOURCES[1]:  # the kept copy is <stem>-<hash>: name the file as uploaded
        kept, uploaded = Path(data).name, Path(str(upload_file)).name
        problems = [p.replace(kept, uploaded) for p in problems]
    return cfg, [for_ui(p) for p in problems]


def _taken_name(cfg) -> list[str]:
    """Why a preference run cannot save under its name: an adapter of that name is on the shelf
    (the run refuses it only once started, a sentence naming --name). SFT makes its name
    unique instead."""
    from finetune.train.preference import output_name

    t = cfg.train
    name = output_name(t.from_adapter, t.method, cfg.run.adapter_name or "")
    if not (paths.home(create=False) / "adapters" / name).exists():
        return []
    given = (
        "" if cfg.run.adapter_name else f" (a {t.method.upper()} run of {t.from_adapter} takes it)"
    )
    return [
        f"an adapter named {quote(name)} is already on the shelf{given}: type another Adapter name"
    ]


def _pairs_for_sft(data_args, problems: list[str]) -> list[str]:
    """``problems`` with the dataset's own (no prompt/response columns, said generically) put
    as what it is: preference pairs, which SFT cannot train on and a preference method can."""
    from finetune.train.preflight import dataset_problems

    generic = set(dataset_problems(data_args))
    if not generic:  # pairs beside a response column: SFT trains on those
        return problems
    name = Path(str(data_args.path)).name
    said = (
        f"{name} looks like preference pairs ({', '.join(PAIR_COLUMNS)} columns), which SFT "
        "cannot train on: pick the preference Method DPO, CPO or ORPO under Advanced (it "
        "continues an adapter from the shelf), or give SFT prompt/response rows"
    )
    at = next((i for i, p in enumerate(problems) if p in generic), len(problems))
    return [*problems[:at], said, *(p for p in problems[at:] if p not in generic)]


def checked_text(hw, fn, src: str, upload_file, typed: str | None, values) -> str:
    """``fn(cfg)`` (an estimate, a dry run) for valid settings, else the list of problems."""
    try:
        cfg, problems = build_config(hw, src, upload_file, typed, values)
        if problems:
            return "**These settings cannot run:**\n" + _items(problems)
        return fn(cfg)
    except (ValueError, OSError, RuntimeError) as err:
        return f"⚠️ {as_markdown(for_ui(str(err)))}"


def start_run(hw, src: str, upload_file, typed: str | None, values) -> tuple[str, str | None]:
    """Start a supervised training run; the message and the new run's id (None: not started)."""
    try:
        runner.check_can_start()  # a run still going or a read-only home, said first
        cfg, problems = build_config(hw, src, upload_file, typed, values)
        if problems:
            return "**Not started — fix these first:**\n" + _items(problems), None
        info = runner.start(cfg)
    except (ValueError, RuntimeError, OSError) as err:
        return f"⚠️ Not started: {as_markdown(for_ui(str(err)))}", None
    return f"Started run `{info.run_id}`.", info.run_id


def _items(problems: list[str]) -> str:
    return "\n".join(f"- {as_markdown(p)}" for p in problems)


def stop_run(current: str | None) -> str:
    """Ask the run (or the latest one) to stop; it saves the adapter at the current step."""
    current = current or latest_run_id()
    if not current:
        return "No run to stop."
    status = runner.stop(current)
    return (
        f"Asked run `{current}` to stop ({status.get('state')}); it saves the adapter at the "
        "current step."
    )


def poll_run(current: str | None) -> tuple[str | None, dict]:
    """The run to show (re-attaching to the latest after a reload or an app
    restart) and its view."""
    current = current or latest_run_id()
    return current, run_view(current)
