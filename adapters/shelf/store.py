"""The adapter shelf: saved LoRA adapters under ``$TUNEDESK_HOME/adapters/<name>/``.

Each folder is a standard PEFT adapter (``adapter_config.json``,
``adapter_model.safetensors``) plus ``manifest.json`` written by the training engine. The
shelf lists, inspects, renames and deletes them; importing and exporting live in
:mod:`adapters.export`. Reading never crashes on a bad folder: it is listed as ``broken``
with a reason a person can act on. Names always pass :func:`core.paths.safe_name`, and
symlinks that leave the home are refused, so a name typed in the UI cannot reach outside it.
What a folder must hold, and the JSON reading and writing, are :mod:`adapters.shelf.manifest`.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adapters.shelf.manifest import (  # noqa: F401  (constants and checks re-exported for callers)
    CONFIG,
    FORMAT,
    MANIFEST,
    PICKLE_REASON,
    PICKLE_WEIGHTS,
    WEIGHTS,
    BrokenAdapterError,
    check_weights,
    manifest_from_config,
    merge_dicts,
    read_json,
    read_lora_config,
    read_valid_manifest,
    write_json_atomic,
)
from core import paths
from core.hashing import file_hash  # noqa: F401  (re-exported: callers import it from here)


class AdapterNotFoundError(ValueError):
    """No adapter of that name is on the shelf."""


@dataclass
class AdapterEntry:
    """One shelf entry: the manifest summary plus what the folder looks like on disk."""

    name: str
    path: Path
    status: str = "ok"  # "ok" or "broken"
    reason: str = ""  # why it is broken; empty when ok
    base_model: str = ""
    base_weight_hash: str = ""
    created: str = ""  # ISO time; the folder's mtime when the manifest has none
    imported: bool = False
    lora: dict = field(default_factory=dict)  # r, alpha, dropout, target_modules
    training: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    adapter_hash: str = ""
    size_bytes: int = 0
    manifest: dict = field(default_factory=dict)  # the full manifest ({} when broken)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


class Shelf:
    """The adapters folder of the current TuneDesk home."""

    def __init__(self) -> None:
        self.home = paths.home()
        self.root = paths.subdir("adapters")

    def path(self, name: str, must_exist: bool = True) -> Path:
        """Return the folder for adapter ``name``, validated.

        Args:
            name: the adapter name (see :func:`core.paths.safe_name`).
            must_exist: raise :class:`AdapterNotFoundError` when there is no such adapter.

        Raises:
            ValueError: a bad name, or a symlink that points outside the home.
        """
        folder = self.root / paths.safe_name(name, "adapter name")
        if folder.is_symlink() or folder.exists():
            return paths.inside(self.home, folder)
        if must_exist:
            raise AdapterNotFoundError(f"no adapter named {name!r} in {self.root}")
        return folder

    def list(self) -> list[AdapterEntry]:
        """Every adapter folder, newest first; bad folders come back ``broken``."""
        folders = [
            p
            for p in self.root.iterdir()
            if not p.name.startswith(".") and (p.is_dir() or p.is_symlink())
        ]
        entries = [self._inspect(p) for p in folders]
        return sorted(entries, key=lambda e: (e.created, e.name), reverse=True)

    def get(self, name: str) -> AdapterEntry:
        """One adapter's entry with its full manifest (``status`` says if it is usable)."""
        self.path(name)  # validates the name and refuses symlinks leaving the home
        return self._inspect(self.root / name)

    def base_of(self, name: str) -> dict:
        """The base model an adapter was trained on: name, weight_hash, architecture, path."""
        entry = self.get(name)
        if not entry.ok:
            raise BrokenAdapterError(f"adapter {name!r} is broken: {entry.reason}")
        base = entry.manifest.get("base_model") or {}
        keys = ("name", "weight_hash", "architecture", "path")
        return {k: base.get(k, "") for k in keys}

    def rename(self, old: str, new: str) -> AdapterEntry:
        """Rename an adapter (never over an existing one) and update its manifest ``name``;
        its own name changes nothing."""
        self.path(old)
        if new == old:
            return self.get(old)
        dst = self.path(new, must_exist=False)
        if dst.exists() or dst.is_symlink():
            raise ValueError(f"an adapter named {new!r} already exists; pick another name")
        with shelf_write(f"rename adapter {old!r} to {new!r}"):
            _rename_no_replace(self.root / old, dst)
        try:
            manifest = read_json(dst / MANIFEST)
        except BrokenAdapterError:
            manifest = {}  # none, or a bad one: the entry lists as broken either way
        if manifest.get("format") == FORMAT:
            write_json_atomic(dst / MANIFEST, {**manifest, "name": new})
        return self.get(new)

    def delete(self, name: str) -> None:
        """Remove an adapter. A symlinked one loses only the link, never its target."""
        self.path(name)  # validates; refuses links that leave the home
        folder = self.root / name
        if folder.is_symlink():
            folder.unlink()
            return
        # Hide it first (one atomic rename): a crash mid-rmtree leaves a hidden folder that
        # listings ignore, never a half adapter on the shelf.
        trash = self.root / f".trash-{name}-{uuid.uuid4().hex[:8]}"
        with shelf_write(f"delete adapter {name!r}"):
            os.rename(folder, trash)
        shutil.rmtree(trash)

    def write_manifest_fields(self, name: str, updates: dict) -> dict:
        """Merge ``updates`` into an adapter's manifest (nested dicts merge key by key).

        Returns:
            The manifest as written.

        Raises:
            ValueError: the adapter is broken, or ``updates`` tries to change
                ``format`` or ``name`` (use :meth:`rename`).
        """
        from filelock import FileLock

        for key in ("format", "name"):
            if key in updates:
                raise ValueError(f"manifest field {key!r} cannot be changed this way")
        folder = self.path(name)
        with FileLock(str(self.root / f".lock-{name}")):  # two writers must not lose fields
            entry = self._inspect(self.root / name)
            if not entry.ok:
                raise BrokenAdapterError(f"adapter {name!r} is broken: {entry.reason}")
            manifest = merge_dicts(entry.manifest, updates)
            write_json_atomic(folder / MANIFEST, manifest)
        return manifest

    def _inspect(self, folder: Path) -> AdapterEntry:
        entry = AdapterEntry(name=folder.name, path=folder, created=_mtime_iso(folder))
        try:
            manifest = read_valid_manifest(folder, self.home)
        except BrokenAdapterError as err:
            entry.status, entry.reason = "broken", str(err)
            if not folder.is_symlink():
                entry.size_bytes = _size_on_disk(folder)
            return entry
        # Only format, name and base_model.name are promised; coerce the rest so one odd
        # manifest (imported from elsewhere) cannot break sorting or the UI table.
        base = manifest["base_model"]
        entry.base_model, entry.base_weight_hash = base["name"], str(base.get("weight_hash", ""))
        entry.created = str(manifest.get("created") or entry.created)
        entry.imported = bool(manifest.get("imported", False))
        for key in ("lora", "training", "data", "metrics"):
            value = manifest.get(key)
            setattr(entry, key, dict(value) if isinstance(value, dict) else {})
        entry.adapter_hash = str(manifest.get("adapter_hash", ""))
        entry.size_bytes, entry.manifest = _size_on_disk(folder.resolve()), manifest
        return entry


@contextmanager
def shelf_write(what: str):
    """Turn an OSError (read-only home, full disk) into one sentence saying what failed."""
    try:
        yield
    except OSError as err:
        where = f" ({err.filename})" if err.filename else ""
        raise OSError(
            f"could not {what}: {err.strerror or err}{where}; the shelf is unchanged"
        ) from err


def _rename_no_replace(src: Path, dst: Path) -> None:
    if src.is_symlink():
        os.rename(src, dst)
        return
    # mkdir is atomic: a concurrent rename to the same name fails here instead of one
    # silently replacing the other. POSIX rename then moves the folder onto the empty dir.
    dst.mkdir()
    try:
        os.rename(src, dst)
    except OSError:
        dst.rmdir()
        raise


def _mtime_iso(folder: Path) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(folder.lstat().st_mtime))
    except OSError:
        return ""


def _size_on_disk(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):  # os.walk does not follow symlinked dirs
        for f in files:
            p = Path(root) / f
            if not p.is_symlink():
                total += p.stat().st_size
    return total
