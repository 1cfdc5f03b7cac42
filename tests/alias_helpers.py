"""Adapters with a recorded release-gate verdict, for the alias tests (shelf, CLI, API)."""

from __future__ import annotations

from adapters.shelf.gate_rules import DEFAULT_RULES, record
from adapters.shelf.store import Shelf

PASSED = {"state": "passed", "reasons": [], "notes": [], "rules": dict(DEFAULT_RULES)}
FAILED = {**PASSED, "state": "failed", "reasons": ["slice 'refund' is worse than base on bleu"]}
ABOUT = {"eval_id": "20261201-000000-abcdef", "date": "2026-12-01T10:00:00", "report": "/r"}


def set_gate(name: str, verdict: dict, shelf: Shelf | None = None) -> None:
    """Record ``verdict`` as adapter ``name``'s release gate (as an evaluation would)."""
    record(shelf or Shelf(), name, verdict, ABOUT)


def put_versions(lora_dir, verdicts: dict[str, dict | None]) -> Shelf:
    """Copies of one LoRA folder on the shelf under each name, with that verdict (None: none)."""
    from adapters.export import import_adapter

    shelf = Shelf()
    for name, verdict in verdicts.items():
        import_adapter(lora_dir, name=name)
        if verdict is not None:
            set_gate(name, verdict, shelf)
    return shelf
