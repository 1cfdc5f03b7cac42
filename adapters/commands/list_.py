"""`python -m adapters list`: the shelf as a table, or as JSON lines with ``--json``.

Each adapter's release gate state is shown beside its status, as the Adapters tab shows it.
"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="one JSON object per adapter")


def main(args) -> int:
    from adapters.shelf.gate_rules import entry_status
    from adapters.shelf_actions import names

    entries = names()
    gates = [entry_status(e).state for e in entries]
    if args.json:
        for e, gate in zip(entries, gates, strict=True):
            row = {k: v for k, v in e.to_dict().items() if k != "manifest"}
            print(json.dumps({**row, "gate": gate}, default=str))
        return 0
    if not entries:
        print("The shelf is empty: train an adapter or import one.")
        return 0
    print(
        f"{'name':32} {'status':7} {'release gate':13} {'base model':36} {'created':19} "
        f"{'MB':>6}  problem"
    )
    for e, gate in zip(entries, gates, strict=True):
        print(
            f"{e.name:32} {e.status:7} {gate:13} {e.base_model[-36:]:36} {e.created[:19]:19} "
            f"{e.size_bytes / 2**20:6.1f}  {e.reason}"
        )
    return 0
