"""Benchmark results as files a person reads: CSV, a markdown report, a PNG plot.

Rows come from :func:`bench.training.grid.run_grid`; :func:`records` flattens them, adds the
speed-up over the matching seed row and the model FLOPs utilisation, and the writers below
only format. ``append_docs`` adds a report to ``docs/benchmarks-log.md`` under a heading naming
the command, the machine and the date.
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from pathlib import Path

COLUMNS = [
    "experiment",
    "recipe",
    "device",
    "batch",
    "accumulation",
    "precision",
    "quantization",
    "examples",
    "real_tokens",
    "seconds",
    "real_tokens_per_s",
    "peak_memory_gib",
    "final_loss",
    "speedup_vs_seed",
    # beyond the headline columns: what the numbers rest on
    "timed_steps",
    "threads",
    "packing",
    "logit_positions",
    "response_val_loss",
    "model_tflop",
    "achieved_tflop_per_s",
    "matmul_tflop_per_s",
    "mfu",
    "token_mfu",
    "error",
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks-log.md"
_KEY = ("device", "batch", "accumulation", "precision", "quantization")


def _round(value, digits: int):
    return None if value is None else round(value, digits)


def _record(row: dict, rates: dict[str, float]) -> dict:
    p = row["point"]
    rec = {
        "experiment": p.name,
        "recipe": p.recipe,
        "device": p.device,
        "batch": p.batch,
        "accumulation": p.accum,
        "precision": p.precision,
        "quantization": p.quantization,
        "threads": row.get("threads"),
        "error": row.get("error", ""),
        "round_tokens_per_s": row.get("round_tokens_per_s") or [],
    }
    if rec["error"]:
        return rec
    achieved = row["model_flops"] / max(row["seconds"], 1e-9) / 1e12
    rate = rates.get(p.device)
    rec.update(
        examples=row["examples"],
        real_tokens=row["real_tokens"],
        seconds=_round(row["seconds"], 3),
        real_tokens_per_s=_round(row["real_tokens_per_s"], 1),
        peak_memory_gib=_round(row["peak_memory_gib"], 3),
        final_loss=_round(row["final_loss"], 4),
        timed_steps=row["timed_steps"],
        packing=row["packing"],
        logit_positions=row["logit_positions"],
        response_val_loss=_round(row["response_val_loss"], 4),
        model_tflop=_round(row["model_flops"] / 1e12, 4),
        achieved_tflop_per_s=_round(achieved, 4),
        matmul_tflop_per_s=_round(rate, 3),
        mfu=_round(achieved / rate, 4) if rate else None,
        token_mfu=_round(row["token_flops"] / max(row["seconds"], 1e-9) / 1e12 / rate, 4)
        if rate and row.get("token_flops")
        else None,
    )
    return rec


def records(rows: list[dict], rates: dict[str, float] | None = None) -> list[dict]:
    """Flat report rows with ``speedup_vs_seed``: real tokens/s over the seed row with the same
    device, batch, accumulation, precision and quantization, else over the first seed row."""
    recs = [_record(r, rates or {}) for r in rows]
    seeds = [r for r in recs if r["recipe"] == "seed" and not r["error"]]
    for rec in recs:
        if rec["error"] or not seeds:
            rec["speedup_vs_seed"] = None
            continue
        same = [s for s in seeds if all(s[k] == rec[k] for k in _KEY)]
        base = (same or seeds)[0]
        rounds = zip(
            rec["round_tokens_per_s"], base["round_tokens_per_s"], strict=False
        )  # one round each, or all
        paired = [(mine, theirs) for mine, theirs in rounds if mine and theirs]
        if len(paired) > 1:  # each round's ratio (rows measured minutes apart), then their median
            rec["speedup_rounds"] = [round(mine / theirs, 2) for mine, theirs in paired]
            rec["speedup_vs_seed"] = _round(
                statistics.median(mine / theirs for mine, theirs in paired), 2
            )
        else:
            rec["speedup_vs_seed"] = _round(
                rec["real_tokens_per_s"] / max(base["real_tokens_per_s"], 1e-9), 2
            )
    return recs


def write_csv(recs: list[dict], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(recs)
    return path


def _cell(value, fmt: str = "{}") -> str:
    return "—" if value is None or value == "" else fmt.format(value)


def markdown(
    recs: list[dict],
    skipped: list,
    rates: dict[str, float],
    settings: str,
    rate_samples: dict[str, list[float]] | None = None,
) -> str:
    """The report: settings, the table, speed-ups, skipped and failed rows, how to read it."""
    lines = [
        f"Settings: {settings}",
        "",
        "| experiment | real tokens/s | speed-up vs seed | seconds | examples | real tokens | "
        "peak memory GiB | final loss | response val loss | MFU | MFU, 4P per token |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in recs:
        if r["error"]:
            continue
        lines.append(
            f"| {r['experiment']} | {r['real_tokens_per_s']:,.0f} | "
            f"{_cell(r['speedup_vs_seed'], '{:.2f}x')} | {r['seconds']:.2f} | {r['examples']} | "
            f"{r['real_tokens']:,} | {r['peak_memory_gib']:.2f} | {r['final_loss']:.3f} | "
            f"{_cell(r['response_val_loss'], '{:.3f}')} | {_cell(r['mfu'], '{:.1%}')} | "
            f"{_cell(r.get('token_mfu'), '{:.1%}')} |"
        )
    lines.append("")
    for r in recs:
        if len(r["round_tokens_per_s"]) > 1 and not r["error"]:
            speeds = " / ".join(_cell(v, "{:,.0f}") for v in r["round_tokens_per_s"])
            ratios = " / ".join(f"{v:.2f}x" for v in r.get("speedup_rounds", []))
            lines.append(
                f"- rounds, {r['experiment']}: {speeds} real tokens/s (the table shows the "
                "median round)"
                + (
                    f"; speed-up vs seed per round {ratios} (the table: their median)"
                    if ratios
                    else ""
                )
            )
    lines += [f"- failed: {r['experiment']}: {r['error']}" for r in recs if r["error"]]
    lines += [f"- skipped: {p.name}: {'; '.join(why)}" for p, why in skipped]
    for d, v in rates.items():
        seen = ", ".join(f"{s:.3f}" for s in (rate_samples or {}).get(d, []))
        lines.append(
            f"- matmul rate on {d}: {v:.3f} TFLOP/s ({'fp32' if d == 'cpu' else 'bf16'}; the "
            "best square matmul over a few "
            f"sizes{f', measured before and after the rows: {seen}' if seen else ''})"
        )
    lines += [
        "- Real tokens are the non-padding tokens of the examples processed in the timed steps, "
        "counted the same way for both recipes; the warm-up steps are not timed.",
        "- Final loss is each recipe's own objective (seed: every real token, prompt included; "
        "tunedesk: response tokens only), so the two are not comparable; the response val loss is, "
        "measured on the same held-out rows for every row.",
        "- MFU = model FLOPs per second / measured matmul rate; model FLOPs = 4 x body params x "
        "real tokens + 6 x LoRA params x real tokens + 4 x head params x head positions + 12 x "
        "layers x attention width x causal pairs (padding not counted; see "
        "bench/training/grid.py).",
        "- MFU, 4P per token: issue 8's measure, real tokens/s x (4 x all parameters + LoRA + "
        "attention FLOPs per token) / matmul rate: the LM head counted on every real token, also "
        "where TuneDesk computes no logits (the seed row computes them all, so its two MFUs are "
        "equal).",
        "- Timings on a shared machine are noisy: compare rows of one run, not across runs.",
    ]
    return "\n".join(lines) + "\n"


def plot(recs: list[dict], path: Path) -> Path:
    """Bar chart of real tokens/s per experiment, coloured by recipe, with speed-ups on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in recs if not r["error"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(ok) + 2), 4.5))
    colors = ["tab:gray" if r["recipe"] == "seed" else "tab:blue" for r in ok]
    bars = ax.bar(range(len(ok)), [r["real_tokens_per_s"] for r in ok], color=colors)
    for bar, r in zip(bars, ok, strict=True):
        if r["speedup_vs_seed"] is not None:
            ax.annotate(
                f"{r['speedup_vs_seed']:.2f}x",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(
        range(len(ok)), [r["experiment"] for r in ok], rotation=30, ha="right", fontsize=8
    )
    ax.set_ylabel("real tokens / s (training)")
    ax.set_title("Training throughput: seed recipe (grey) vs TuneDesk (blue)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def machine(devices: list[str]) -> str:
    """CPU model and cores, or the GPU name(s), of the devices measured."""
    from bench.training.grid import physical_cores

    gpus = sorted({d for d in devices if d.startswith("cuda")})
    if gpus:
        import torch

        return ", ".join(
            torch.cuda.get_device_name(0 if d == "cuda" else int(d.split(":")[1])) for d in gpus
        )
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from finetune.train.allocator import in_use

    return (
        f"{model}, {physical_cores()} physical cores ({os.cpu_count()} logical), {in_use()} malloc"
    )


def append_docs(report: str, command: str, machine_text: str, path: Path = DOCS) -> Path:
    """Append ``report`` to the benchmarks page under a heading: date, machine, command."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = (
        ""
        if path.is_file()
        else "# Benchmarks\n\nWritten by `python -m bench training --write-docs`.\n"
    )
    section = (
        f"\n## {time.strftime('%Y-%m-%d')} — {machine_text}\n\n```\n{command}\n```\n\n{report}"
    )
    with open(path, "a") as f:
        f.write(head + section)
    return path
