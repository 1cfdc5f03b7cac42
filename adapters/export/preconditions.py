"""What must hold before an adapter is exported: on the shelf, intact, on the very base weights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from adapters.shelf.adapter_folder import check_base, read_adapter_folder
from adapters.shelf.store import (
    WEIGHTS,
    AdapterEntry,
    BrokenAdapterError,
    Shelf,
    file_hash,
    read_lora_config,
)
from core import models


def shelf_at(home: Path | None = None) -> Shelf:
    """The shelf of ``home`` (default: the current TuneDesk home)."""
    shelf = Shelf()
    if home is not None:
        shelf.home = Path(home).expanduser().resolve()
        shelf.root = shelf.home / "adapters"
    return shelf


def checked_adapter(
    name: str, *, home: Path | None = None
) -> tuple[AdapterEntry, models.ResolvedModel]:
    """The shelf entry (``adapter_hash`` = hash of the weights on disk) and its resolved base.

    Raises:
        ValueError: no such adapter; a broken one (the shelf's reason); unreadable weights;
            a base model that cannot be found or whose weights differ from the ones trained on.
    """
    from adapters.export.hf import resolve_base

    entry = shelf_at(home).get(name)
    if not entry.ok:
        raise BrokenAdapterError(f"adapter {name!r} is broken: {entry.reason}")
    read_adapter_folder(name, entry.path)  # weights readable, LoRA tensors present
    resolved = resolve_base(entry.manifest.get("base_model") or {})
    check_base(name, entry.manifest, resolved)
    # The cache key is the weights as they are now, not a hash a manifest claims.
    return replace(entry, adapter_hash=file_hash(entry.path / WEIGHTS)), resolved


def refuse_dora(entry: AdapterEntry) -> None:
    """DoRA adapters have no llama.cpp LoRA form (the merged export handles them)."""
    if read_lora_config(entry.path).get("use_dora"):
        raise ValueError(
            f"adapter {entry.name!r} is a DoRA adapter; llama.cpp's LoRA GGUF cannot hold DoRA's "
            "magnitude vectors, so export it merged instead"
        )
