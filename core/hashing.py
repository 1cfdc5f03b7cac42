"""Short content hashes used in manifests (adapter, tokenizer, chat template). No torch."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_hash(path: Path) -> str:
    """sha256 of a file, first 16 hex digits (e.g. the manifest's ``adapter_hash``)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def text_hash(text: str | None) -> str:
    """sha256 of a string, first 16 hex digits."""
    return hashlib.sha256((text or "").encode()).hexdigest()[:16]
