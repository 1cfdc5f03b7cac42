"""The model session: one base model in memory plus named LoRA adapters from the shelf.

The base loads lazily (or in the background via ``load(wait=False)``) and is never reloaded:
adapters are injected into it with PEFT and unloaded least-recently-used first. Generation
goes through :meth:`ModelSession.generate`, which names the adapter of every batch row
(``"__base__"`` or None for the base), so a request never depends on which adapter some
other request "switched" to. One ``RLock`` guards every load, unload and generate call: the
routing patches layers of the shared model for the call, so two calls must not overlap, and
nobody may see a half-loaded or half-deleted adapter.

This module holds the state (model, adapters, lock); how a call is routed to its adapters is
``routing.py``, how many threads it runs on is ``threads.py``, and loading the base and
injecting an adapter's weights is ``loading.py``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from adapters.shelf.adapter_folder import (  # noqa: F401  (re-exported)
    CONFIG,
    MANIFEST,
    PICKLE_WEIGHTS,
    WEIGHTS,
    AdapterMismatchError,
    check_base,
    read_adapter_folder,
)
from adapters.shelf.manifest import BrokenAdapterError, read_valid_manifest
from core import models, paths
from core.hashing import file_hash
from inference.devices import DTYPES, dtype_reason, physical_cores, pick_dtype  # noqa: F401  (re-exported)
from inference.loading import inject_adapter, load_model, load_tokenizer
from inference.merged import MergedWeights
from inference.packed_linears import pack_linears
from inference.routing import BASE, drop_adapter_name_hooks, is_peft, route, set_adapter
from inference.threads import serving_threads, set_call_threads


@dataclass
class LoadedAdapter:
    """An adapter held in memory, with what identifies its weights."""

    name: str
    peft_name: str  # the name inside PEFT: shelf names may hold "." or be a part of "lora_"
    path: Path
    adapter_hash: str  # manifest adapter_hash, or sha256 of the weights (16 hex)
    manifest: dict = field(default_factory=dict)
    stamp: int = 0  # manifest.json mtime_ns when loaded; a change means "retrained, reload"


def is_base(adapter: str | None) -> bool:
    """True for the names that mean "the base model": ``None``, ``""`` and ``"__base__"``."""
    return adapter in (None, "", BASE)


class ModelSession:
    """One base model plus up to ``max_loaded_adapters`` LoRA adapters, safe across threads.

    Args:
        base_name: a name or folder for :func:`core.models.resolve` (``default``: SmolLM2).
        device: ``cpu`` or ``cuda[:i]``.
        dtype: weight dtype; ``auto``: on a CPU the faster of fp32/bf16 by a short measurement,
                on a GPU bf16 where native (see :func:`pick_dtype`).
        max_loaded_adapters: adapters kept in memory; the least recently used goes first.
        adapters_dir: the shelf folder; default ``$TUNEDESK_HOME/adapters`` at load time.
    """

    def __init__(
        self,
        base_name: str = "default",
        device: str = "cpu",
        max_loaded_adapters: int = 4,
        adapters_dir: Path | None = None,
        dtype: str = "auto",
        cores_busy: Callable[[], bool] | None = None,
    ):
        """``cores_busy``: asked before each call on the CPU; True (another process is
        computing on these cores, e.g. a training run) runs the call on one thread."""
        if max_loaded_adapters < 1:
            raise ValueError(f"max_loaded_adapters must be at least 1, got {max_loaded_adapters}")
        self.base_name, self.device = base_name, device
        self.dtype = pick_dtype(dtype, device)
        self.dtype_reason = dtype_reason(dtype, device, self.dtype)
        self.max_loaded_adapters = max_loaded_adapters
        self._adapters_dir = Path(adapters_dir) if adapters_dir else None
        self._lock = threading.RLock()
        self._state, self._error, self._load_seconds = "not loaded", None, None
        self.linears = ""  # how the linear layers run (inference/packed_linears.py), once loaded
        self._model = self._tokenizer = self._resolved = None
        self._adapters: OrderedDict[str, LoadedAdapter] = OrderedDict()  # LRU order, oldest first
        self._snapshot: tuple[str, ...] = ()  # adapter names for status() without the lock
        self._active: str | None = None
        self._counter = 0  # numbers PEFT-side adapter names
        self.threads: int | None = None
        self.cores_busy = cores_busy
        self.merged = MergedWeights(max_sets=2)  # fast single-adapter decode (merged.py)

    # -- status and base loading --------------------------------------------------------

    def status(self) -> dict:
        """What the UI shows; never waits for the lock, so it answers while loading."""
        return {
            "state": self._state,
            "base": self.base_name,
            "device": self.device,
            "dtype": self.dtype,
            "dtype_reason": self.dtype_reason,
            "model": self._resolved.name if self._resolved else None,
            "adapters": list(self._snapshot),
            "active": self._active,
            "load_seconds": self._load_seconds,
            "error": self._error,
            "threads": self.threads,
            "linears": self.linears,
        }

    def load(self, wait: bool = True) -> None:
        """Load the base model now (``wait=False``: in a background thread; poll ``status``)."""
        if not wait:
            self._state = "loading" if self._state != "ready" else "ready"
            threading.Thread(target=self._load_quietly, daemon=True, name="tunedesk-load").start()
            return
        if self._model is not None:  # fast path: no lock once loaded
            return
        with self._lock:
            if self._model is None:
                self._load_base()

    def _load_quietly(self) -> None:
        with suppress(Exception):  # recorded in status()["error"]; the next use retries, raises
            self.load()

    def _load_base(self) -> None:
        self._state, self._error, start = "loading", None, time.perf_counter()
        try:
            if self.device == "cpu":
                self.threads = serving_threads()
            self.load_tokenizer()
            model = load_model(self._resolved, self.device, self.dtype)
            self.linears = pack_linears(model)
        except Exception as err:
            self._state, self._error = "error", f"{type(err).__name__}: {err}"
            raise
        self._model = model
        self._load_seconds = round(time.perf_counter() - start, 3)
        self._state = "ready"

    def load_tokenizer(self):
        """The base model's tokenizer alone, without the weights (:meth:`load` keeps it):
        what tokenizing needs, checked before the slower load."""
        with self._lock:
            if self._tokenizer is None:
                resolved = models.resolve(self.base_name)
                self._tokenizer, self._resolved = load_tokenizer(resolved), resolved
            return self._tokenizer

    @property
    def model(self):
        """The model (a ``PeftModel`` once an adapter is loaded); loads the base if needed."""
        self.load()
        return self._model

    @property
    def tokenizer(self):
        self.load()
        return self._tokenizer

    @property
    def resolved(self) -> models.ResolvedModel:
        self.load()
        return self._resolved

    @property
    def base_model(self):
        """The underlying transformers model; the same object for the session's lifetime."""
        model = self.model
        return model.get_base_model() if is_peft(model) else model

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    # -- adapters -----------------------------------------------------------------------

    @property
    def loaded_adapters(self) -> list[str]:
        """Adapters in memory, least recently used first."""
        return list(self._snapshot)

    @property
    def active_adapter(self) -> str | None:
        return self._active

    def adapter_folder(self, name: str) -> Path:
        """The shelf folder of adapter ``name`` (validated; cannot leave the shelf)."""
        if self._adapters_dir is None:  # fixed at first use: the home cannot move under us
            self._adapters_dir = paths.subdir("adapters")
        root = self._adapters_dir
        return paths.inside(root, root / paths.safe_name(name, "adapter name"))

    def check_usable(self, name: str) -> dict:
        """The checks every engine runs before answering from adapter ``name``: whole on the
        shelf, and trained on the very base weights this session runs. Returns its manifest.

        Raises:
            AdapterMismatchError: it was trained on another base model.
            ValueError: no such adapter, or its folder is unusable (the reason is named).
        """
        self.load()
        return self.shelf_manifest(name)

    def shelf_manifest(self, name: str) -> dict:
        """:meth:`check_usable`'s checks with the tokenizer loaded alone, not the weights.

        Raises:
            AdapterMismatchError, ValueError: as :meth:`check_usable`.
        """
        self.load_tokenizer()  # resolves the base the adapter must have been trained on
        folder = self.adapter_folder(name)
        self._check_shelf(name, folder)
        manifest = read_adapter_folder(name, folder)
        check_base(name, manifest, self._resolved)
        return manifest

    def shelf_hash(self, name: str) -> str:
        """Adapter ``name``'s hash as :meth:`load_adapter` records it, from the shelf alone."""
        return _digest(self.shelf_manifest(name), self.adapter_folder(name))

    def load_adapter(self, name: str) -> LoadedAdapter:
        """Load adapter ``name`` from the shelf (no-op when loaded) and mark it recently used.

        Raises:
            AdapterMismatchError: it was trained on another base model.
            ValueError: no such adapter, or its folder is unusable (the reason is named).
        """
        with self._lock:
            return self.ensure_adapter(name, keep={name})

    def unload_adapter(self, name: str) -> None:
        """Drop adapter ``name`` from memory (e.g. after it was deleted from the shelf)."""
        with self._lock:
            if name not in self._adapters:
                return
            loaded = self._adapters.pop(name)
            self.merged.drop(loaded.peft_name)
            if self._adapters:
                self._model.delete_adapter(loaded.peft_name)
            else:  # PEFT cannot hold zero adapters: unwrap back to the (same) base object
                self._model = self._model.unload()
            self._after_change()

    def activate(self, adapter: str | None) -> LoadedAdapter | None:
        """Choose the chat's adapter (``None``/``"__base__"``: the base model).

        Generation names its adapter per call, so this only loads the adapter and records
        the choice; the base is never reloaded and no layer is touched.
        """
        with self._lock:
            info = None if is_base(adapter) else self.ensure_adapter(adapter, keep={adapter})
            self._active = None if info is None else info.name
            return info

    def adapter_hash(self, adapter: str | None) -> str:
        """The adapter's hash, or the base weight hash for the base model."""
        if is_base(adapter):
            return self.resolved.weight_hash
        return self.load_adapter(adapter).adapter_hash

    def ensure_adapter(self, name: str, keep: set[str]) -> LoadedAdapter:
        self.load()
        folder = self.adapter_folder(name)
        loaded = self._adapters.get(name)
        self._check_shelf(name, folder)  # on every use: the copy in memory may be stale
        if loaded is not None:
            if _stamp(folder) == loaded.stamp:
                self._adapters.move_to_end(name)
                self._after_change()
                return loaded
            self.unload_adapter(name)  # deleted or retrained under the same name since loading
        manifest = read_adapter_folder(name, folder)
        check_base(name, manifest, self._resolved)
        self._counter += 1
        peft_name = f"tunedesk_{self._counter}"
        self._model = inject_adapter(self._model, name, peft_name, folder, self.device)
        digest = _digest(manifest, folder)
        loaded = LoadedAdapter(name, peft_name, folder, digest, manifest, _stamp(folder))
        self._adapters[name] = loaded
        excess = len(self._adapters) - self.max_loaded_adapters
        for old in [n for n in self._adapters if n not in keep][: max(0, excess)]:
            self.unload_adapter(old)
        self._after_change()
        return loaded

    def _check_shelf(self, name: str, folder: Path) -> None:
        """The shelf's own check (files, JSON, weights' size and hash; cached, so cheap).

        Raises:
            BrokenAdapterError: with the reason the shelf lists; a copy of the adapter in
                memory is dropped first, so nothing keeps answering from it.
        """
        if not folder.is_dir():
            return  # read_adapter_folder says "no adapter named ..." in its own words
        try:
            read_valid_manifest(folder, self._adapters_dir.parent)
        except BrokenAdapterError as err:
            self.unload_adapter(name)
            raise BrokenAdapterError(f"adapter {name!r} is broken: {err}") from None

    def _after_change(self) -> None:
        self._snapshot = tuple(self._adapters)
        if self._active is not None and self._active not in self._adapters:
            self._active = None

    # -- running the model --------------------------------------------------------------

    def generate(self, inputs: dict, adapters: list[str | None], seed: int | None = None, **kwargs):
        """One ``model.generate`` call whose row ``i`` uses ``adapters[i]`` (None: the base).

        Holds the session lock for the whole call, so no adapter is loaded, evicted or
        switched under a running answer, and ``seed`` (set right before the call) makes
        sampling reproducible. ``kwargs`` go to ``generate`` unchanged.
        """
        import torch

        names = [None if is_base(a) else a for a in adapters]
        wanted = list(dict.fromkeys(n for n in names if n))
        if len(wanted) > self.max_loaded_adapters:
            raise ValueError(
                f"{len(wanted)} different adapters in one batch, but the session holds "
                f"at most {self.max_loaded_adapters}"
            )
        with self._lock:
            for name in wanted:
                self.ensure_adapter(name, keep=set(wanted))
            model = self._model
            self.set_threads(torch)
            if seed is not None:
                torch.manual_seed(seed)
            context, extra = route(
                model, [self._adapters[n].peft_name if n else None for n in names], self.merged
            )
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            with torch.inference_mode(), context:
                try:
                    return model.generate(**inputs, **kwargs, **extra)
                except BaseException:
                    drop_adapter_name_hooks(model)
                    raise

    @contextmanager
    def use(self, adapter: str | None):
        """Yield the model set to ``adapter`` for plain forward passes (e.g. perplexity).

        Holds the lock until the block ends; flips PEFT's active adapter, and for the base
        disables adapter layers, only inside the block.
        """
        import torch

        with self._lock:
            self.set_threads(torch)
            if not is_base(adapter):
                self.ensure_adapter(adapter, keep={adapter})
            peft_name = None if is_base(adapter) else self._adapters[adapter].peft_name
            with set_adapter(self._model, peft_name):
                yield self._model

    def set_threads(self, torch) -> None:
        """This call's threads (threads.py); the serving scheduler asks it between steps too."""
        set_call_threads(torch, self.threads, self.cores_busy)


def _stamp(folder: Path) -> int:
    try:
        return (folder / MANIFEST).stat().st_mtime_ns
    except OSError:
        return -1


def _digest(manifest: dict, folder: Path) -> str:
    """An adapter's hash: its manifest's, else its weights file's."""
    return str(manifest.get("adapter_hash") or file_hash(folder / WEIGHTS))
