"""Counts of what the reliability tests tried, for docs/reliability.md.

Tests call ``FUZZ.add(test, outcome)`` once per hypothesis example (and ``FAULTS`` /
``HOSTILE`` once per fault injected or bad input tried); each test module calls ``write_all()``
at teardown. The totals land in ``test-artifacts/fuzz_counts.json``, ``faults.json`` and
``hostile_inputs.json``, merged with what other modules wrote, so a partial run keeps the
other numbers. Not a conftest.py: tests import helpers by module name (see tests/run_helpers.py).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


class Tally:
    """``{test: {outcome: count, "total": count}}``, written to one JSON artifact."""

    def __init__(self, filename: str):
        self.path = ARTIFACTS / filename
        self.counts: Counter = Counter()

    def add(self, test: str, outcome: str) -> None:
        self.counts[(test, outcome)] += 1

    def write(self) -> dict:
        if not self.counts:
            return {}
        found = json.loads(self.path.read_text()) if self.path.is_file() else {}
        mine: dict[str, dict] = {}
        for (test, outcome), n in sorted(self.counts.items()):
            mine.setdefault(test, {})[outcome] = n
        for outcomes in mine.values():
            outcomes["total"] = sum(outcomes.values())
        found.update(mine)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
        return found


FUZZ, FAULTS, HOSTILE = (
    Tally("fuzz_counts.json"),
    Tally("faults.json"),
    Tally("hostile_inputs.json"),
)


def write_all() -> None:
    for tally in (FUZZ, FAULTS, HOSTILE):
        tally.write()
