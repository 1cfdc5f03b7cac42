"""What the fault tests check the shelf with: an adapter put on it as the trainer would, a
folder's file hashes (to show nothing changed), and the adapters a user sees (each whole)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from adapters.shelf.store import Shelf, file_hash
from core import models


def visible_shelf(home: Path) -> list[str]:
    """Adapter folders a user sees; each must be whole and usable."""
    entries = Shelf().list()
    assert all(e.ok for e in entries), [(e.name, e.reason) for e in entries if not e.ok]
    assert {e.name for e in entries} == {
        p.name for p in (home / "adapters").iterdir() if not p.name.startswith(".")
    }
    return sorted(e.name for e in entries)


def snapshot(folder: Path) -> dict:
    """``{relative path: sha256}`` of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def shelve(peft_dir: Path, base_dir: Path, name: str) -> Path:
    """Put a copy of a LoRA adapter on the shelf with a manifest like the trainer writes."""
    folder = Shelf().root / name
    shutil.copytree(peft_dir, folder)
    manifest = {
        "format": "tunedesk-adapter/1",
        "name": name,
        "created": "2026-01-01T00:00:00",
        "base_model": {
            "name": str(base_dir),
            "weight_hash": models.resolve(str(base_dir)).weight_hash,
        },
        "adapter_hash": file_hash(folder / "adapter_model.safetensors"),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
