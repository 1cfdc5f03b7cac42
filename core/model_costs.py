"""The measured cost table of the recommended models: what ``python -m bench model-costs`` wrote
into ``assets/model_costs.json`` and what the Train tab's Check quotes.

The file holds the machine it was measured on (CPU model, cores, the instruction sets that
change training and decoding speed: AVX2, AVX512-BF16, AMX), the date, the command, the
settings the rows trained with, and per Hub id: training real tokens/s and peak memory for
TuneDesk's recipe and the seed recipe, and llama-server's decode tokens/s at Q8_0 (or why a
figure is missing). No torch here: Check reads it without loading anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "assets" / "model_costs.json"
FORMAT = "tunedesk-model-costs/1"
FLAGS = ("avx2", "avx512_bf16", "amx")  # what decides CPU training and decoding speed here


def machine_info(cpuinfo: str | None = None) -> dict:
    """This machine: CPU model, usable cores and the flags in ``FLAGS`` (from /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = "unknown CPU", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    has = {
        "avx2": "avx2" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": bool({"amx_bf16", "amx_int8", "amx_tile"} & flags),
    }
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "flags": has}


def describe_machine(machine: dict) -> str:
    """``"AMD EPYC, 2 cores, AVX2 only (no AVX512-BF16, no AMX)"``."""
    flags = machine.get("flags", {})
    names = {"avx2": "AVX2", "avx512_bf16": "AVX512-BF16", "amx": "AMX"}
    have = [names[f] for f in FLAGS if flags.get(f)]
    lack = [names[f] for f in FLAGS if not flags.get(f)]
    text = f"{machine.get('cpu', 'unknown CPU')}, {machine.get('cores', '?')} cores"
    if have:
        text += f", {', '.join(have)}{' only' if lack else ''}"
    return text + (f" (no {', no '.join(lack)})" if lack else "")


def same_machine(a: dict, b: dict) -> bool:
    """Whether two machines would measure alike: the same CPU model, cores and flags."""
    return all(a.get(k) == b.get(k) for k in ("cpu", "cores", "flags"))


def write(table: dict, path: Path = TABLE) -> Path:
    """Write ``table`` (``machine``, ``date``, ``command``, ``settings``, ``models``) atomically."""
    missing = [k for k in ("machine", "date", "command", "settings", "models") if k not in table]
    if missing:
        raise ValueError(f"a cost table needs {', '.join(missing)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **table}, indent=2) + "\n")
    tmp.replace(path)
    return path


def read(path: Path = TABLE) -> dict | None:
    """The cost table at ``path``, or None when there is none or it is not one (never raises)."""
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    ok = (
        isinstance(table, dict)
        and table.get("format") == FORMAT
        and isinstance(table.get("models"), dict)
    )
    return table if ok else None


def _cell(value, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def markdown(table: dict) -> str:
    """The table as markdown: one row per model, training beside the seed recipe, then serving."""
    head = (
        "| model | parameters | TuneDesk tok/s | TuneDesk peak GiB | seed tok/s | seed peak GiB "
        "| llama-server Q8_0 decode tok/s | notes |\n|---|---:|---:|---:|---:|---:|---:|---|"
    )
    rows = []
    for hub_id, m in table["models"].items():
        tuned, seed = (
            m.get("training", {}).get("tunedesk", {}),
            m.get("training", {}).get("seed", {}),
        )
        serving = m.get("serving", {})
        notes = [f"{k}: {v}" for k, v in m.get("errors", {}).items()]
        if "load_average_1min_after" in m:  # another process on the cores shows here
            notes.append(f"load average {m['load_average_1min_after']:.1f} after")
        notes = "; ".join(notes)
        rows.append(
            f"| {m.get('name', hub_id)} (`{hub_id}`) | {m.get('params', 0) / 1e6:,.0f} M | "
            f"{_cell(tuned.get('tokens_per_s'), ',.0f')} | "
            f"{_cell(tuned.get('peak_memory_gib'), '.2f')} | "
            f"{_cell(seed.get('tokens_per_s'), ',.0f')} | "
            f"{_cell(seed.get('peak_memory_gib'), '.2f')} | "
            f"{_cell(serving.get('decode_tokens_per_s'), '.1f')} | {notes} |"
        )
    return "\n".join([head, *rows])
