"""Rows and details for the Adapters tab, from the shelf. No gradio here."""

from __future__ import annotations

from adapters.shelf.gate_rules import entry_status
from core.user_text import printable

COLUMNS = [
    "name",
    "status",
    "release gate",
    "base model",
    "created",
    "data",
    "rows",
    "r",
    "steps",
    "val ppl (base → tuned)",
    "eval BLEU / ROUGE-L",
    "size MB",
    "problem",
]


def _fmt(x, digits=2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "—"


def shelf_rows(entries) -> list[list]:
    rows = []
    for e in entries:
        m, ev = e.metrics or {}, (e.manifest or {}).get("eval", {})
        ppl = (
            f"{_fmt(m.get('base_val_perplexity'))} → {_fmt(m.get('val_perplexity'))}" if m else "—"
        )
        scores = f"{_fmt(ev.get('bleu'), 1)} / {_fmt(ev.get('rouge_l'), 3)}" if ev else "—"
        rows.append(
            [
                printable(c) if isinstance(c, str) else c
                for c in [
                    e.name,
                    e.status,
                    entry_status(e).state,
                    e.base_model.rsplit("/", 1)[-1],
                    e.created,
                    str(e.data.get("path", "—")),
                    e.data.get("train_rows", "—"),
                    e.lora.get("r", "—"),
                    (e.manifest or {}).get("steps", "—"),
                    ppl,
                    scores,
                    round(e.size_bytes / 2**20, 1),
                    e.reason,
                ]
            ]
        )
    return rows


def details_markdown(entry) -> str:
    """A readable summary of one adapter's manifest."""
    if not entry.ok:
        return f"### {entry.name} — broken\n\n**Why:** {entry.reason}"
    m = entry.manifest
    t, d, lora = m.get("training", {}), m.get("data", {}), m.get("lora", {})
    lines = [
        f"### {entry.name}",
        f"- **Base:** `{entry.base_model}` (weights `{entry.base_weight_hash}`)",
        f"- **Adapter hash:** `{entry.adapter_hash}` · created {entry.created}"
        + (" · imported" if entry.imported else ""),
        f"- **LoRA:** r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}, "
        f"targets {', '.join(lora.get('target_modules', []) or [])}",
    ]
    if t:
        lines.append(
            f"- **Training:** {t.get('device')} · {t.get('precision')} · quantization "
            f"{t.get('quantization')} · batch {t.get('batch_size')} × accumulation "
            f"{t.get('grad_accum')} · lr {t.get('learning_rate')} · {m.get('steps')} steps "
            f"({m.get('status', 'done')})"
        )
    if d:
        lines.append(
            f"- **Data:** `{d.get('path')}` · {d.get('train_rows')} train / {d.get('val_rows')} "
            f"validation rows · fingerprint `{d.get('fingerprint')}`"
        )
    lineage = m.get("lineage")
    if isinstance(lineage, dict):
        pref = m.get("preference") or {}
        lines.append(
            f"- **Lineage:** {lineage.get('parent')} (`{str(lineage.get('parent_hash'))[:12]}`) "
            f"+ {lineage.get('pairs')} preference pairs by "
            f"{str(lineage.get('method', '')).upper()} (`{lineage.get('pairs_file')}`; beta "
            f"{pref.get('beta')}, lr {pref.get('learning_rate')})"
        )
    if entry.metrics:
        lines.append(
            "- **Metrics:** " + ", ".join(f"{k} {_fmt(v, 3)}" for k, v in entry.metrics.items())
        )
    gate = entry_status(entry)
    why = "; ".join(gate.reasons)
    lines.append(
        f"- **Release gate:** {gate.state}"
        + (f" (evaluation `{gate.eval_id}`, {gate.date})" if gate.eval_id else "")
        + (f": {why}" if why else "")
        + " · rules: `gate.json` in its folder, "
        f"`python -m adapters gate {entry.name}`"
    )
    # the support checks' floors that held or could not be checked, with their figures
    lines += [f"  - {figure}" for figure in gate.floors]
    if m.get("eval"):
        lines.append(
            "- **Last evaluation:** "
            + ", ".join(
                f"{k} {v if not isinstance(v, float) else round(v, 3)}"
                for k, v in m["eval"].items()
                if not isinstance(v, dict)
            )
        )
    return "\n".join(lines)
