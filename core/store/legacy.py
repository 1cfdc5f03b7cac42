"""The JSON-lines files TuneDesk kept before the store, imported once at first start.

``feedback/answers.jsonl`` (logged answers), ``feedback/ratings.jsonl`` (ratings and their
review status) and ``releases/audit.jsonl`` (alias changes) of a home folder go into the store
the first time it is opened there. Each file is imported once, ever (the ``imports`` table
remembers it by its full path, so replicas sharing a PostgreSQL each bring their own); rows
already in the store (same id) are skipped; torn lines are skipped; the files themselves are
never changed or deleted, so going back to an older TuneDesk finds them as they were.
"""

from __future__ import annotations

import time
from pathlib import Path

from core.paths import read_json_lines
from core.store.db import Store
from core.store.tables import put_answer, put_audit, put_ratings

FILES = {
    "feedback/answers.jsonl": put_answer,
    "feedback/ratings.jsonl": "ratings",
    "releases/audit.jsonl": put_audit,
}


def import_json_lines(store: Store, home: Path) -> dict[str, int]:
    """Import the home's old JSON-lines files not imported before; rows imported per file."""
    done = {}
    for name, put in FILES.items():
        path = (Path(home) / name).resolve()
        if not path.is_file():
            continue
        with store.transaction():
            if store.query("SELECT name FROM imports WHERE name = ?", (str(path),)):
                continue
            rows = [r for r in read_json_lines(path) if _usable(name, r)]
            if put == "ratings":
                put_ratings(store, *({**r, "rater": None} for r in rows))
            else:
                for row in rows:
                    put(store, row)
            store.execute(
                "INSERT INTO imports (name, at, rows_imported) VALUES (?, ?, ?)",
                (str(path), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), len(rows)),
            )
        done[name] = len(rows)
    return done


def _usable(name: str, row: dict) -> bool:
    if name == "feedback/ratings.jsonl":
        return row.get("rating") in ("up", "down")
    if name == "releases/audit.jsonl":
        return bool(row.get("id"))
    return bool(row.get("id")) and bool(row.get("adapter") is not None)
