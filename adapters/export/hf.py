"""Moving adapters on and off the shelf: import (folder or zip), export as zip or merged model.

Zips are treated as hostile: member names that climb out (``..``, absolute, drive letters),
symlinks, encrypted members, too many members, too many bytes and compression bombs are
refused before anything is extracted, and the byte count is enforced again while
extracting because zip headers can lie. Extraction happens in a hidden temp folder inside
the home; an adapter reaches the shelf only through one atomic rename, complete.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

from adapters.shelf.safe_zip import ZipLimits, safe_extract  # noqa: F401  (re-exported)
from adapters.shelf.store import (
    CONFIG,
    FORMAT,
    MANIFEST,
    PICKLE_REASON,
    PICKLE_WEIGHTS,
    WEIGHTS,
    AdapterEntry,
    BrokenAdapterError,
    Shelf,
    check_weights,
    file_hash,
    manifest_from_config,
    read_json,
    read_lora_config,
    shelf_write,
    write_json_atomic,
)
from core import paths

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")  # never copied onto the shelf


def import_adapter(
    src: Path,
    name: str | None = None,
    allow_pickle: bool = False,
    *,
    limits: ZipLimits = ZipLimits(),
    shelf: Shelf | None = None,
) -> AdapterEntry:
    """Copy a PEFT LoRA adapter (folder or ``.zip``) onto the shelf.

    Args:
        src: a folder holding ``adapter_config.json`` (directly or in its only subfolder),
            or a zip of one.
        name: the shelf name; default is the folder or zip stem, sanitized (and suffixed
            ``-2``, ``-3``... when taken). An explicit name that is taken is refused.
        allow_pickle: accept ``adapter_model.bin`` and convert it to safetensors (loaded
            with ``torch.load(weights_only=True)``). Off by default: pickles can run code.
        limits: the zip safety limits.
        shelf: the shelf to import into (default: the current home's).

    Raises:
        ValueError: an unsafe zip, or a folder that is not a usable LoRA adapter.
    """
    shelf = shelf or Shelf()
    src = Path(src).expanduser()
    if not src.exists():
        raise ValueError(
            f"{src} does not exist; name an adapter folder (holding adapter_config.json) or "
            "a .zip of one"
        )
    if name is None:
        name = _free_name(shelf, sanitize_name(src.stem if src.is_file() else src.name))
    target = shelf.path(name, must_exist=False)
    if target.exists() or target.is_symlink():
        raise ValueError(f"an adapter named {name!r} already exists; pick another name")
    with shelf_write(f"import {src.name} as {name!r}"):
        if src.is_dir():
            _publish(_adapter_root(src, src.name), target, allow_pickle)
        elif src.is_file() and zipfile.is_zipfile(src):
            staging = Path(tempfile.mkdtemp(prefix=".tmp-import-", dir=shelf.root))
            try:
                safe_extract(src, staging, limits)
                _publish(_adapter_root(staging, src.name), target, allow_pickle)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        else:
            raise ValueError(f"{src} is neither an adapter folder nor a zip file")
    return shelf.get(name)


def export_merged(
    name: str, out_dir: Path | None = None, *, overwrite: bool = False, shelf: Shelf | None = None
) -> Path:
    """Merge an adapter into its base model and save a standalone model folder.

    The merged model (fp32 safetensors), the tokenizer and ``tunedesk_export.json`` (which
    adapter and base it came from) go to ``exports/<name>-merged/`` by default, atomically.

    Args:
        name: the adapter on the shelf.
        out_dir: where to write instead of the default.
        overwrite: replace an existing export (otherwise it is refused).
        shelf: the shelf holding the adapter (default: the current home's).

    Raises:
        ValueError: a broken adapter, a base model that cannot be found, or NaN/inf weights.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shelf = shelf or Shelf()
    entry = shelf.get(name)
    if not entry.ok:
        raise BrokenAdapterError(f"adapter {name!r} is broken: {entry.reason}")
    base = resolve_base(entry.manifest.get("base_model") or {})
    target = Path(out_dir) if out_dir else paths.subdir("exports") / f"{name}-merged"
    check_export_target(target, shelf)
    if target.exists() and not overwrite:
        raise ValueError(f"{target} already exists; leave out --no-overwrite to replace it")
    if target.exists() and (
        not target.is_dir()
        or (any(target.iterdir()) and not (target / "tunedesk_export.json").is_file())
    ):
        raise ValueError(
            f"{target} exists and is not a merged model TuneDesk wrote; it is left as it is: "
            "choose a new or empty folder"
        )
    # Never run code shipped with a model or an imported adapter (unset, transformers asks
    # on stdin and runs it on "y").
    model = AutoModelForCausalLM.from_pretrained(
        base.path, dtype=torch.float32, trust_remote_code=False
    )
    # safe_merge checks each merged layer for NaNs before it replaces the base weights.
    merged = PeftModel.from_pretrained(model, entry.path).merge_and_unload(safe_merge=True)
    weights = merged.state_dict().items()
    if bad := [k for k, t in weights if t.is_floating_point() and not torch.isfinite(t).all()]:
        raise ValueError(f"merged weights hold NaN/inf in {bad[:3]}; export refused")
    has_tokenizer = (entry.path / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(
        entry.path if has_tokenizer else base.path, trust_remote_code=False
    )
    with paths.atomic_dir(target) as tmp:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {
            "adapter": name,
            "adapter_hash": entry.adapter_hash,
            "base_model": base.to_dict(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        write_json_atomic(tmp / "tunedesk_export.json", info)
        old = move_aside(target) if target.exists() else None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def export_zip(name: str, out: Path | None = None, *, shelf: Shelf | None = None) -> Path:
    """Zip an adapter (files under ``<name>/``) for download; default ``exports/<name>.zip``."""
    shelf = shelf or Shelf()
    entry = shelf.get(name)
    if not entry.ok:
        raise BrokenAdapterError(f"adapter {name!r} is broken: {entry.reason}")
    folder = entry.path
    out = Path(out) if out else paths.subdir("exports") / f"{name}.zip"
    check_export_target(out, shelf)
    if out.is_dir():
        raise ValueError(f"{out} is a folder; name the .zip file to write, e.g. {out / name}.zip")
    if out.exists() and not zipfile.is_zipfile(out):
        raise ValueError(f"{out} exists and is not a zip; it is left as it is: choose another name")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{out.stem}-", suffix=".zip", dir=out.parent)
    try:
        with open(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(folder.iterdir()):
                # Hidden temp files and links are not part of the adapter.
                if f.is_file() and not f.is_symlink() and not f.name.startswith("."):
                    zf.write(f, f"{name}/{f.name}")
        Path(tmp).replace(out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def check_export_target(target: Path, shelf: Shelf) -> None:
    """Refuse an export path that would write over the shelf or the home holding it.

    Raises:
        ValueError: ``target`` is inside the shelf, or the shelf or the home lies inside it.
    """
    where, root = target.resolve(), shelf.root.resolve()
    home = (shelf.home or root.parent).resolve()
    if where in (root, home) or root in where.parents or where in root.parents:
        raise ValueError(
            f"{target} is on the adapter shelf or holds it; an export goes outside "
            f"{root} (by default under {home / 'exports'})"
        )


def sanitize_name(stem: str) -> str:
    """Turn a file or folder stem into a valid adapter name (``"adapter"`` if nothing is left)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem)
    name = re.sub(r"\.{2,}", ".", name)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:64]
    return name or "adapter"


def resolve_base(base: dict):
    """Resolve the manifest's base model; fall back to the folder it was trained from."""
    from core.models import ModelNotFoundError, resolve

    try:
        return resolve(base.get("name", ""))
    except ModelNotFoundError:
        trained_from = Path(base.get("path") or "")
        if base.get("path") and (trained_from / "config.json").is_file():
            return resolve(str(trained_from))
        raise


def _identified_base(base: dict) -> dict:
    """The base an imported adapter names, as a trained adapter records it: the model's id
    (a path to this app's model cache becomes its id) and its weight hash, where this machine
    has the model; else as the adapter said, to be refused by name at use."""
    from core.models import DEFAULT_MODEL, ModelNotFoundError, cache_dir_for, is_default, resolve

    name = str(base.get("name") or "")
    if base.get("weight_hash") or not name:
        return base
    try:  # only what is here already: an import never converts or downloads a model
        here = (
            Path(name).expanduser().is_dir()
            or (
                cache_dir_for(DEFAULT_MODEL if is_default(name) else name) / "config.json"
            ).is_file()
        )
        resolved = resolve(name, allow_hub=False) if here else None
    except (ModelNotFoundError, ValueError, OSError):
        return base
    if resolved is None:
        return base
    return {
        **base,
        "name": resolved.name,
        "architecture": resolved.architecture,
        "weight_hash": resolved.weight_hash,
    }


def move_aside(folder: Path) -> Path:
    """Rename ``folder`` to a hidden trash name beside it, so the new one can take its place."""
    trash = folder.parent / f".trash-{folder.name}-{uuid.uuid4().hex[:8]}"
    folder.rename(trash)
    return trash


def _publish(folder: Path, target: Path, allow_pickle: bool) -> None:
    with paths.atomic_dir(target) as tmp:
        _copy_adapter_files(folder, tmp, allow_pickle)
        _finish_import(tmp, target.name)


def _adapter_root(folder: Path, shown: str) -> Path:
    """The folder holding adapter_config.json: ``folder`` itself or its only subfolder
    (``shown``: what the user gave, a zip's name rather than its staging folder)."""
    if (folder / CONFIG).is_file():
        return folder
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(subs) == 1 and (subs[0] / CONFIG).is_file() and not subs[0].is_symlink():
        return subs[0]
    held = (
        f"; {shown} holds {len(subs)} folders ({', '.join(p.name for p in subs[:5])}): "
        "import one adapter at a time"
        if len(subs) > 1
        else ""
    )
    raise ValueError(f"no adapter_config.json in {shown} (nor in a single subfolder){held}")


def _copy_adapter_files(src: Path, dst: Path, allow_pickle: bool) -> None:
    """Copy the top-level plain files; pickles other than the adapter weights are dropped."""
    for f in src.iterdir():
        if f.is_symlink() or not f.is_file() or f.name.startswith("."):
            continue
        if f.suffix in _PICKLE_SUFFIXES and not (f.name == PICKLE_WEIGHTS and allow_pickle):
            continue
        shutil.copyfile(f, dst / f.name)
    if not (dst / WEIGHTS).exists() and (src / PICKLE_WEIGHTS).is_file() and not allow_pickle:
        raise ValueError(PICKLE_REASON)
    if (dst / PICKLE_WEIGHTS).exists():
        if not (dst / WEIGHTS).exists():
            _convert_pickle(dst / PICKLE_WEIGHTS, dst / WEIGHTS)
        (dst / PICKLE_WEIGHTS).unlink()


def _convert_pickle(src: Path, dst: Path) -> None:
    import torch
    from safetensors.torch import save_file

    try:
        state = torch.load(src, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses anything but tensors and plain containers
        raise ValueError(f"{src.name} could not be read safely ({err})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ValueError(f"{src.name} is not a flat dict of tensors; refused")
    # save_file refuses tensors that share memory; cloning makes each one standalone.
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, str(dst))


def _finish_import(folder: Path, name: str) -> None:
    """Validate the copied adapter, then write its manifest and a model card."""
    try:
        config = read_lora_config(folder)
        check_weights(folder, config)
    except BrokenAdapterError as err:
        raise ValueError(f"not a usable LoRA adapter: {err}") from None
    if not config.get("base_model_name_or_path"):
        raise ValueError("adapter_config.json does not name its base model; refused")
    manifest = manifest_from_config(name, config, imported=True)
    if (folder / MANIFEST).is_file():
        try:  # a TuneDesk manifest (an adapter exported elsewhere) keeps metrics and settings
            old = read_json(folder / MANIFEST)
        except BrokenAdapterError:
            old = {}  # a bad one: the fresh manifest from the config stands
        base = old.get("base_model")
        if old.get("format") == FORMAT and isinstance(base, dict) and base.get("name"):
            manifest = {**old, "name": name, "imported": True}
    manifest["base_model"] = _identified_base(manifest["base_model"])
    manifest["adapter_hash"] = file_hash(folder / WEIGHTS)
    manifest["adapter_bytes"] = (
        (folder / WEIGHTS).stat().st_size
    )  # checked by adapters/shelf/integrity.py
    write_json_atomic(folder / MANIFEST, manifest)
    if not (folder / "README.md").exists():
        (folder / "README.md").write_text(_model_card(manifest))


def _model_card(manifest: dict) -> str:
    lora = manifest.get("lora") or {}
    return (
        f"# {manifest['name']}\n\nLoRA adapter imported into TuneDesk on "
        f"{time.strftime('%Y-%m-%d')}.\n\n- base model: `{manifest['base_model']['name']}`\n"
        f"- r={lora.get('r')}, alpha={lora.get('alpha')}, "
        f"target modules: {lora.get('target_modules')}\n"
    )


def _free_name(shelf: Shelf, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``... whichever is not on the shelf yet."""
    candidate, n = name, 1
    while (shelf.root / candidate).exists() or (shelf.root / candidate).is_symlink():
        n += 1
        candidate = f"{name[: 64 - len(str(n)) - 1]}-{n}"
    return candidate
