"""Run files: ``events.jsonl`` (one JSON object per line) and ``status.json``.

The child process writes them; the UI and CLI read them. Files, never a pipe: a reader can
come and go (page reload, app restart) without the writer noticing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

STATES = ("queued", "running", "stopping", "done", "failed", "stopped")


class EventLog:
    """Callable ``on_event`` sink appending JSON lines (flushed per event)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, event: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event, default=str) + "\n")


def read_events(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """Events written since byte ``offset``; returns them and the new offset.

    A half-written last line (the writer is mid-append) is left for the next read.
    """
    path = Path(path)
    if not path.is_file():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        chunk = f.read()
    events, consumed = [], 0
    for line in chunk.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        consumed += len(line)
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn line from a killed writer; skip it
    return events, offset + consumed


def write_status(run_dir: Path, **fields) -> dict:
    """Merge ``fields`` into ``status.json`` atomically (temp file + rename)."""
    path = Path(run_dir) / "status.json"
    status = read_status(run_dir) or {}
    status.update(fields, updated=time.time())
    tmp = path.with_name(f".status-{os.getpid()}.tmp")
    tmp.write_text(json.dumps(status, indent=2, default=str))
    os.replace(tmp, path)
    return status


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
