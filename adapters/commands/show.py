"""`python -m adapters show NAME`: one adapter's entry; broken ones say why (exit code 1)."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("name", help="adapter name on the shelf")
    p.add_argument("--json", action="store_true", help="the whole entry and manifest as JSON")


def main(args) -> int:
    from adapters.shelf_actions import show

    entry = show(args.name)
    if args.json:
        print(json.dumps(entry.to_dict(), indent=2, default=str))
    elif not entry.ok:
        print(f"{entry.name} — broken\nWhy: {entry.reason}")
    else:
        m, lora = entry.manifest, entry.lora
        lines = [
            entry.name,
            f"  base        {entry.base_model} (weights {entry.base_weight_hash or '?'})",
            f"  hash        {entry.adapter_hash or '?'} · created {entry.created}"
            + (" · imported" if entry.imported else ""),
            f"  LoRA        r={lora.get('r')} alpha={lora.get('alpha')} "
            f"dropout={lora.get('dropout')} targets {', '.join(lora.get('target_modules') or [])}"
            + (f" in the last {lora['top_layers']} blocks" if lora.get("top_layers") else ""),
            f"  size        {entry.size_bytes / 2**20:.1f} MB at {entry.path}",
        ]
        if entry.data:
            lines.append(
                f"  data        {entry.data.get('path')} · {entry.data.get('train_rows')} train / "
                f"{entry.data.get('val_rows')} validation rows"
            )
        known = m.get("knowledge")
        if isinstance(known, dict) and known.get("name"):
            lines.append(
                f"  knowledge   {known['name']} {known.get('version', '?')} · "
                f"{known.get('passages', '?')} passages it was trained beside "
                "(grounding auto answers from it)"
            )
        if entry.metrics:
            lines.append("  metrics     " + ", ".join(f"{k} {v}" for k, v in entry.metrics.items()))
        if m.get("eval"):
            lines.append(
                "  evaluation  "
                + ", ".join(f"{k} {v}" for k, v in m["eval"].items() if not isinstance(v, dict))
            )
        print("\n".join(lines))
    return 0 if entry.ok else 1
