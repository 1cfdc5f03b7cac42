"""Checks on an adapter folder before it touches the model: files, JSON, weights, base."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.shelf.manifest import (  # one home for the names
    CONFIG,
    MANIFEST,
    PICKLE_WEIGHTS,
    WEIGHTS,
    manifest_from_config,
)
from core import models, paths


class AdapterMismatchError(ValueError):
    """The adapter was trained on a different base model than the session runs."""


def read_adapter_folder(name: str, folder: Path) -> dict:
    """Check an adapter folder before it touches the model; return its manifest.

    Raises:
        ValueError: naming the adapter and what is wrong (missing files, bad JSON, pickle
            weights, a non-LoRA adapter, unreadable safetensors).
    """

    def bad(reason: str) -> ValueError:
        return ValueError(f"adapter {name!r} is unusable: {reason} (folder {folder})")

    if not folder.is_dir():
        raise ValueError(f"no adapter named {name!r} on the shelf ({folder} does not exist)")
    for part in (CONFIG, WEIGHTS, MANIFEST):  # a linked file must not pull in data from elsewhere
        try:
            paths.inside(folder, folder / part)
        except ValueError as err:
            raise bad(str(err)) from None
    if not (folder / WEIGHTS).is_file():
        if (folder / PICKLE_WEIGHTS).is_file():
            raise bad(
                f"only pickle weights ({PICKLE_WEIGHTS}); they can run code when loaded, "
                f"so only {WEIGHTS} is accepted"
            )
        raise bad(f"{WEIGHTS} is missing")
    docs = {}
    for fname in (MANIFEST, CONFIG):
        if fname == MANIFEST and not (folder / MANIFEST).exists():
            continue  # a plain PEFT folder: the shelf lists it from its config (below)
        try:
            docs[fname] = json.loads((folder / fname).read_text())
        except (OSError, ValueError, RecursionError) as err:  # RecursionError: [[[[... bombs
            raise bad(f"{fname} cannot be read as JSON ({err})") from err
        if not isinstance(docs[fname], dict):
            raise bad(f"{fname} is not a JSON object")
    if MANIFEST not in docs:
        docs[MANIFEST] = manifest_from_config(name, docs[CONFIG])
    if docs[CONFIG].get("peft_type", "LORA") != "LORA":
        raise bad(f"peft_type {docs[CONFIG].get('peft_type')!r}; only LoRA adapters are supported")
    try:
        from safetensors import safe_open

        with safe_open(str(folder / WEIGHTS), framework="pt") as fh:
            if not any("lora_" in key for key in fh.keys()):  # noqa: SIM118 (not a dict)
                raise bad(f"{WEIGHTS} holds no LoRA tensors")
    except ValueError:
        raise
    except Exception as err:  # safetensors raises its own error types for bad headers
        raise bad(f"{WEIGHTS} is not a valid safetensors file ({err})") from err
    return docs[MANIFEST]


def check_base(name: str, manifest: dict, resolved: models.ResolvedModel) -> None:
    """Refuse an adapter whose manifest names other base weights than ``resolved``.

    Raises:
        AdapterMismatchError: saying which base the adapter needs and which one is loaded.
    """
    base = manifest.get("base_model") or {}
    want_hash, want_name = base.get("weight_hash"), base.get("name")
    same = want_hash == resolved.weight_hash if want_hash else want_name == resolved.name
    if not same:
        raise AdapterMismatchError(
            f"adapter {name!r} was trained on base model {want_name!r} (weights {want_hash}), "
            f"but this session runs {resolved.name!r} (weights {resolved.weight_hash}); "
            f"start a session on {want_name!r} or pick an adapter trained on {resolved.name!r}"
        )
