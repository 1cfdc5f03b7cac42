"""GGUF files converted once and kept: a base model per weights + type, a LoRA per adapter hash.

Layout under ``$TUNEDESK_HOME/exports/gguf/``::

    base/<model>-<weight_hash>/model-<type>.gguf     (f16, q8_0 ... ; q4_k_m from the f16 file)
    lora/<adapter_hash>/<adapter>-lora-f16.gguf

Each file is written under a hidden temp name and renamed into place, under a per-file lock,
so concurrent callers (chat serving, an export) convert once and never read a half file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from adapters.export import llama_tools
from adapters.export.hf import sanitize_name
from adapters.export.llama_tools import OUTTYPES, QUANTIZER_TYPES, Progress
from core import models, paths

LORA_TYPE = "f16"


def ensure_base_gguf(
    resolved_or_base_id,
    outtype: str = "q8_0",
    *,
    home: Path | None = None,
    on_progress: Progress | None = None,
) -> Path:
    """The base model as GGUF, converted by llama.cpp once per weights and type.

    Args:
        resolved_or_base_id: a :class:`core.models.ResolvedModel`, or a name/path to resolve.
        outtype: ``f32``, ``f16``, ``bf16``, ``q8_0`` (converter) or ``q4_k_m``, ``q5_k_m``
            (quantizer, from the f16 file).
        home: the TuneDesk home whose ``exports/`` holds the cache (default: the current one).
        on_progress: called with (fraction of this step or -1, converter line).

    Raises:
        ValueError: an unknown type or model; llama_tools.LlamaToolsError: the conversion failed.
    """
    outtype = check_outtype(outtype)
    resolved = resolved_or_base_id
    if not isinstance(resolved, models.ResolvedModel):
        resolved = models.resolve(str(resolved_or_base_id))
    slug = sanitize_name(resolved.path.name[-40:])  # models/<org>--<name>, or a local folder
    target = _gguf_root(home) / "base" / f"{slug}-{resolved.weight_hash}" / f"model-{outtype}.gguf"
    with _once(target) as tmp:
        if tmp is not None and outtype in QUANTIZER_TYPES:
            f16 = ensure_base_gguf(resolved, "f16", home=home, on_progress=on_progress)
            _report(on_progress, f"quantizing {resolved.name} to {outtype}")
            llama_tools.quantize(f16, tmp, outtype, on_progress)
        elif tmp is not None:
            convert_model(resolved.path, tmp, outtype, on_progress)
    return target


def ensure_lora_gguf(
    adapter_name: str, *, home: Path | None = None, on_progress: Progress | None = None
) -> Path:
    """A shelf adapter as a llama.cpp LoRA GGUF (f16), converted once per adapter weights.

    Raises:
        ValueError: the adapter is missing, broken, of other base weights, or DoRA (a sentence).
        llama_tools.LlamaToolsError: the conversion failed.
    """
    from adapters.export.preconditions import checked_adapter, refuse_dora

    entry, resolved = checked_adapter(adapter_name, home=home)
    refuse_dora(entry)
    target = _gguf_root(home) / "lora" / entry.adapter_hash / f"{entry.name}-lora-{LORA_TYPE}.gguf"
    if not target.is_file() and target.parent.is_dir():
        # Same weights under an earlier name (renamed on the shelf): reuse that file.
        earlier = sorted(p for p in target.parent.glob("*.gguf") if not p.name.startswith("."))
        if earlier:
            return earlier[0]
    with _once(target) as tmp:
        if tmp is not None:
            convert_lora(entry.path, resolved.path, tmp, on_progress)
    return target


def lora_weights_hash(lora_gguf: Path) -> str:
    """The hash of the adapter weights a cached LoRA GGUF was converted from (its folder's name)."""
    return Path(lora_gguf).parent.name


def convert_model(
    model_dir: Path, out: Path, outtype: str, on_progress: Progress | None = None
) -> None:
    """``convert_hf_to_gguf.py`` on a Hugging Face model folder (converter types only)."""
    llama_tools.run_converter(
        "convert_hf_to_gguf.py",
        [str(model_dir), "--outtype", outtype, "--outfile", str(out)],
        on_progress,
    )


def convert_lora(
    adapter_dir: Path, base_dir: Path, out: Path, on_progress: Progress | None = None
) -> None:
    """``convert_lora_to_gguf.py`` on a PEFT adapter folder, against a local base folder."""
    llama_tools.run_converter(
        "convert_lora_to_gguf.py",
        [str(adapter_dir), "--base", str(base_dir), "--outtype", LORA_TYPE, "--outfile", str(out)],
        on_progress,
    )


def check_outtype(outtype: str) -> str:
    """``outtype`` lower-cased, or ValueError naming the choices."""
    low = str(outtype).lower()
    if low not in OUTTYPES:
        raise ValueError(f"unknown GGUF type {outtype!r}; choose one of {', '.join(OUTTYPES)}")
    return low


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[Path]:
    """Yield a hidden temp path beside ``target``; rename it into place when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".tmp-{target.stem}-", suffix=target.suffix, dir=target.parent
    )
    os.close(fd)
    try:
        yield Path(tmp)
        if not Path(tmp).is_file() or Path(tmp).stat().st_size == 0:
            raise llama_tools.LlamaToolsError(f"nothing was written for {target.name}")
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a model file is not a secret
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def _once(target: Path) -> Iterator[Path | None]:
    """Under a lock on ``target``: yield None when it exists, else a temp path to fill."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".lock-{target.name}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits, then finds the file made
        if target.is_file():
            yield None
            return
        with atomic_file(target) as tmp:
            yield tmp


def _gguf_root(home: Path | None) -> Path:
    exports = Path(home).expanduser().resolve() / "exports" if home else paths.subdir("exports")
    return exports / "gguf"


def _report(on_progress: Progress | None, text: str) -> None:
    if on_progress is not None:
        on_progress(-1.0, text)
