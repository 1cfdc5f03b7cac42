"""What the chosen base model costs, quoted from the measured table (``core.model_costs``), for the
Train tab's Check and ``python -m finetune train --dry-run``.

For a model in the table: TuneDesk's training tokens/s and peak memory, the steps the time budget
buys at that speed (tokens per step from the settings), and llama-server's decode tokens/s at
Q8_0, naming the machine that measured them and when, and saying so when this machine's CPU is
another. Where this machine measured these very settings itself (``speed_record``: a dry run or
a run), that measurement sizes the budget instead. A model the table lacks gets "" (the memory
estimate alone). No torch here.
"""

from __future__ import annotations

from core import model_costs
from core.model_catalog import find


def cost_text(
    cfg, table: dict | None = None, here: dict | None = None, name: str | None = None
) -> str:
    """The measured-cost paragraph for ``cfg.model.name``, or "" when the table lacks the model.

    Args:
        cfg: the run configuration (model, batch, accumulation, max length, time budget).
        table: a cost table (default: the one shipped in assets/, ``core.model_costs.read``).
        here: this machine (default ``core.model_costs.machine_info()``).
        name: the model's canonical name when ``cfg.model.name`` is a folder (the resolver's).
    """
    table = model_costs.read() if table is None else table
    entry, hub_id = _entry(table, cfg.model.name)
    if entry is None and name:
        entry, hub_id = _entry(table, name)
    if entry is None:
        return ""
    here = model_costs.machine_info() if here is None else here
    measured_on = table.get("machine", {})
    tuned = entry.get("training", {}).get("tunedesk", {})
    parts = [
        f"**Measured cost of {entry.get('name', hub_id)}** (random weights of its real shape, "
        f"measured on {model_costs.describe_machine(measured_on)} on "
        f"{str(table.get('date', '?'))[:10]}, {_settings(table.get('settings', {}))}):"
    ]
    if tuned.get("tokens_per_s"):
        parts.append(
            f"training {tuned['tokens_per_s']:,.0f} tokens/s, peak memory "
            f"{tuned.get('peak_memory_gib', 0):.1f} GiB."
        )
        parts.append(_steps_sentence(cfg, tuned, entry))
    else:
        parts.append(
            f"training not measured ({entry.get('errors', {}).get('tunedesk', 'no figure')})."
        )
    decode = entry.get("serving", {}).get("decode_tokens_per_s")
    parts.append(
        f"Serving: llama-server decodes {decode:.1f} tokens/s for one client at Q8_0."
        if decode
        else f"Serving not measured ({entry.get('errors', {}).get('serving', 'no figure')})."
    )
    if not model_costs.same_machine(measured_on, here):
        parts.append(
            f"⚠️ This machine ({model_costs.describe_machine(here)}) is not the one measured: "
            "expect other figures here (a **Dry run** measures this machine)."
        )
    return " ".join(p for p in parts if p)


def _entry(table: dict | None, name: str) -> tuple[dict | None, str]:
    """The table's row for ``name`` (a Hub id, display name or default alias) and its Hub id."""
    if not table:
        return None, ""
    model = find(name)
    hub_id = model.hub_id if model else (name or "").strip()
    return table.get("models", {}).get(hub_id), hub_id


def _settings(s: dict) -> str:
    return (
        f"batch {s.get('batch_size', '?')} x {s.get('grad_accum', '?')}, max length "
        f"{s.get('max_length', '?')}, {s.get('precision', '?')}, LoRA r {s.get('lora_r', '?')}, "
        f"{s.get('data', '?')}"
    )


def _steps_sentence(cfg, tuned: dict, entry: dict) -> str:
    """The steps the time budget buys at the table's speed, or a pointer to this machine's own."""
    from finetune.config import micro_batch
    from finetune.train.speed_record import load

    t = cfg.train
    if not (isinstance(t.time_budget_s, (int, float)) and t.time_budget_s > 0):
        return ""
    if t.method == "sft" and load(cfg) is not None:
        return (
            "Steps inside the time budget: from this machine's own measurement of these "
            "settings (a dry run or a run), not from this table."
        )
    per_example = min(
        entry.get("training", {}).get("tokens_per_example") or cfg.data.max_length,
        cfg.data.max_length,
    )
    batch = micro_batch(t)
    per_step = batch * t.grad_accum * per_example
    steps = int(t.time_budget_s * tuned["tokens_per_s"] / per_step)
    return (
        f"At that speed the {t.time_budget_s / 60:g}-minute budget holds about {steps:,} steps "
        f"of {per_step:,.0f} tokens ({batch} x {t.grad_accum} rows of {per_example:,.0f} "
        "tokens, the measured data's mean) before start-up and validation take their share."
    )
