"""What an adapter folder must hold, and reading and writing its JSON files safely.

A shelf folder is a standard PEFT adapter (``adapter_config.json``,
``adapter_model.safetensors``) plus TuneDesk's ``manifest.json``. The checks here never load
weights (the safetensors header only), refuse giant or deeply nested JSON, and report the
first problem as a :class:`BrokenAdapterError` a person can act on. :mod:`adapters.shelf.store`
(the shelf) and the importers in :mod:`adapters.export` use them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from adapters.shelf.integrity import weights_problem
from core import paths

FORMAT = "tunedesk-adapter/1"
MANIFEST, CONFIG = "manifest.json", "adapter_config.json"
WEIGHTS, PICKLE_WEIGHTS = "adapter_model.safetensors", "adapter_model.bin"
PICKLE_REASON = (
    "pickle weights (.bin) are not loaded; convert to safetensors or import with allow_pickle=True"
)
_MAX_JSON_BYTES = 4 << 20  # manifests and configs are a few KB; refuse to parse a planted giant


class BrokenAdapterError(ValueError):
    """An adapter folder that cannot be used; the message says why in plain words."""


def read_valid_manifest(folder: Path, home: Path) -> dict:
    """Check an adapter folder and return its manifest (built from the config if absent).

    Raises:
        BrokenAdapterError: the first problem found, in plain words.
    """
    try:
        name = paths.safe_name(folder.name, "adapter name")
        folder = paths.inside(home, folder)
    except ValueError as err:
        raise BrokenAdapterError(str(err)) from None
    for part in (CONFIG, WEIGHTS, MANIFEST):  # a file may be a link too: it must stay inside
        try:
            paths.inside(folder, folder / part)
        except ValueError as err:
            raise BrokenAdapterError(str(err)) from None
    config = read_lora_config(folder)
    check_weights(folder, config)
    if not (folder / MANIFEST).exists():
        return manifest_from_config(name, config)
    manifest = read_json(folder / MANIFEST)
    if manifest.get("format") != FORMAT:
        raise BrokenAdapterError(
            f"manifest.json has format {manifest.get('format')!r}, expected {FORMAT!r}"
        )
    base = manifest.get("base_model")
    if not isinstance(base, dict) or not isinstance(base.get("name"), str) or not base["name"]:
        raise BrokenAdapterError("manifest.json does not name its base model (base_model.name)")
    problem = weights_problem(
        folder / WEIGHTS, manifest
    )  # size and hash (adapters/shelf/integrity.py)
    if problem:
        raise BrokenAdapterError(problem)
    return manifest


def read_lora_config(folder: Path) -> dict:
    """Parse ``adapter_config.json`` and check it describes a LoRA adapter."""
    if not (folder / CONFIG).is_file():
        raise BrokenAdapterError("adapter_config.json is missing")
    config = read_json(folder / CONFIG)
    if not isinstance(config, dict):
        raise BrokenAdapterError("adapter_config.json is not a JSON object")
    if str(config.get("peft_type", "")).upper() != "LORA":
        raise BrokenAdapterError(
            f"adapter_config.json has peft_type {config.get('peft_type')!r}; only LORA is supported"
        )
    problem = _config_problem(config)
    if problem:
        raise BrokenAdapterError(f"adapter_config.json: {problem}")
    return config


def _config_problem(config: dict) -> str | None:
    """The first field of a LoRA config PEFT could not load, in words (None: none)."""

    def number(value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    r = config.get("r")
    if type(r) is not int or r < 1:
        return f"r must be a whole number of at least 1, not {str(r)[:40]!r}"
    for key in ("lora_alpha", "lora_dropout"):
        if config.get(key) is not None and not number(config[key]):
            return f"{key} must be a number, not {str(config[key])[:40]!r}"
    targets = config.get("target_modules")
    if targets is not None and not (
        isinstance(targets, str)
        or (isinstance(targets, list) and all(isinstance(t, str) for t in targets))
    ):
        return f"target_modules must be a name or a list of names, not {str(targets)[:40]!r}"
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            return f"{key} must be an object"
    return None


def check_weights(folder: Path, config: dict | None = None) -> list[str]:
    """Check the safetensors weights by reading only the header; return the tensor names.

    With ``config`` (the adapter's LoRA config), also check the weights' rank is its ``r``
    (skipped where ``rank_pattern`` gives modules ranks of their own).
    """
    from safetensors import SafetensorError, safe_open

    weights = folder / WEIGHTS
    if not weights.is_file():
        if (folder / PICKLE_WEIGHTS).is_file():
            raise BrokenAdapterError(PICKLE_REASON)
        raise BrokenAdapterError("adapter_model.safetensors is missing")
    try:
        # framework="numpy": parsing the header needs no torch import, so listing stays quick.
        with safe_open(str(weights), framework="numpy") as fh:
            keys = list(fh.keys())
            first_a = next((k for k in keys if k.endswith("lora_A.weight")), None)
            rows = fh.get_slice(first_a).get_shape()[0] if first_a else None
    except (SafetensorError, OSError) as err:
        raise BrokenAdapterError(
            f"adapter_model.safetensors is damaged or not a safetensors file ({err})"
        ) from None
    if not keys:
        raise BrokenAdapterError("adapter_model.safetensors holds no tensors")
    if config and not config.get("rank_pattern") and rows is not None and rows != config["r"]:
        raise BrokenAdapterError(
            f"adapter_model.safetensors holds rank-{rows} LoRA weights ({first_a}), "
            f"but adapter_config.json says r={config['r']}"
        )
    return keys


def manifest_from_config(name: str, config: dict, imported: bool = False) -> dict:
    """A minimal manifest for a PEFT adapter that came without one."""
    targets = config.get("target_modules")
    manifest = {
        "format": FORMAT,
        "name": name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "base_model": {"name": config.get("base_model_name_or_path") or ""},
        "lora": {
            "r": config.get("r"),
            "alpha": config.get("lora_alpha"),
            "dropout": config.get("lora_dropout"),
            # PEFT writes a set as a list in arbitrary order; sort it so manifests compare.
            "target_modules": targets if isinstance(targets, str) else sorted(targets or []),
        },
    }
    if imported:
        manifest["imported"] = True
    return manifest


def merge_dicts(base: dict, updates: dict) -> dict:
    """Return ``base`` updated recursively: nested dicts merge, other values replace."""
    merged = dict(base)
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_dicts(merged[key], value)
        else:
            merged[key] = value
    return merged


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON to a temp file beside ``path``, fsync it, then ``os.replace`` it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict:
    """Parse a small JSON object file; any problem becomes a :class:`BrokenAdapterError`."""
    try:
        if path.stat().st_size > _MAX_JSON_BYTES:
            raise BrokenAdapterError(f"{path.name} is implausibly large; refused")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BrokenAdapterError(f"{path.name} is not valid JSON ({err})") from None
    except RecursionError:  # [[[[... thousands deep: refused, not a crash of the listing
        raise BrokenAdapterError(f"{path.name} is nested too deeply to be a manifest") from None
    if not isinstance(data, dict):
        raise BrokenAdapterError(f"{path.name} does not hold a JSON object")
    return data
