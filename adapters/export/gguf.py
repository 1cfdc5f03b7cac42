"""GGUF export of a shelf adapter for llama.cpp, Ollama and LM Studio.

``exports/<name>-gguf/`` receives, atomically:

- ``<name>-<type>.gguf``: the merged model (PEFT merge, then llama.cpp's converter; Q4_K_M and
  Q5_K_M from llama.cpp's quantizer on the F16 file), chat template and special tokens inside;
- with ``lora=True``: ``base-<type>.gguf`` plus ``<name>-lora-f16.gguf``, which llama.cpp
  applies on top of the base without merging (both from the per-home cache, see
  :mod:`adapters.export.gguf_cache`);
- ``Modelfile`` (and ``Modelfile.lora``) for ``ollama create``, ``README.md``, and
  ``manifest.json`` with each file's size and sha256.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adapters.export import gguf_cache, llama_tools
from adapters.export.hf import check_export_target
from adapters.export.llama_tools import QUANTIZER_TYPES, Progress
from adapters.export.preconditions import checked_adapter, refuse_dora
from adapters.export.readme import readme
from adapters.shelf.gate_rules import entry_status, warning_for
from adapters.shelf.store import Shelf
from core import paths

FORMAT = "tunedesk-gguf-export/1"
log = logging.getLogger(__name__)


@dataclass
class ExportedFile:
    """One file of a GGUF export."""

    file: str
    kind: str  # "merged", "base", "lora", "modelfile", "readme"
    bytes: int
    sha256: str


@dataclass
class GgufExport:
    """What an export wrote: the folder and every file with its size and sha256."""

    folder: Path
    files: list[ExportedFile] = field(default_factory=list)
    timings: dict = field(default_factory=dict)  # seconds per step
    template_note: str = ""  # why the Modelfile has no TEMPLATE, when it has none
    gate_warning: str = ""  # the adapter has not passed its release gate (a warning, not a refusal)


def export_gguf(
    name: str,
    types: tuple[str, ...] = ("f16", "q8_0"),
    *,
    lora: bool = False,
    base_type: str = "q8_0",
    out_dir: Path | None = None,
    overwrite: bool = False,
    on_progress: Progress | None = None,
) -> GgufExport:
    """Export a shelf adapter as GGUF files with an Ollama Modelfile.

    Args:
        name: the adapter on the shelf.
        types: merged-model types (``f16``, ``q8_0``, ``q4_k_m``, ``q5_k_m``, ...); may be empty
            when ``lora`` is set.
        lora: also write the base GGUF (``base_type``) and the adapter as a LoRA GGUF.
        base_type: the base file's type for the LoRA pair.
        out_dir: the export folder (default ``exports/<name>-gguf``).
        overwrite: replace an existing export (otherwise it is refused).
        on_progress: called with (overall fraction 0..1, message).

    Raises:
        ValueError: bad types, a missing/broken/other-base adapter, DoRA with ``lora``,
            an existing export; llama_tools.LlamaToolsError: tools missing or a failed step.
    """
    types = tuple(dict.fromkeys(gguf_cache.check_outtype(t) for t in types))
    base_type = gguf_cache.check_outtype(base_type)
    if not types and not lora:
        raise ValueError("nothing to export: choose at least one GGUF type or the LoRA pair")
    entry, resolved = checked_adapter(name)
    if lora:
        refuse_dora(entry)
    gate_warning = warning_for(entry)
    if gate_warning:  # exported all the same: the gate informs, it does not refuse
        log.warning("exporting anyway: %s", gate_warning)
    for script in llama_tools.CONVERTERS:
        llama_tools.converter(script)  # the tools are there before any heavy work starts
    target = export_folder(name, out_dir)
    check_export_target(target, Shelf())
    if target.exists() and not overwrite:
        raise ValueError(f"{target} already exists; give --overwrite to replace it")
    if target.exists() and not _replaceable(target):
        raise ValueError(
            f"{target} exists and is not a GGUF export TuneDesk wrote; it is left as it is: "
            "choose a new or empty folder"
        )
    paths.check_writable(target.parent)
    n_steps = (
        1 + len(types) + (_needs_f16(types) and "f16" not in types) if types else 0
    ) + 2 * lora
    steps = _Steps(on_progress, n_steps)
    result = GgufExport(target, gate_warning=gate_warning)
    with paths.atomic_dir(target) as tmp:
        if types:
            _merged_files(name, types, tmp, steps)
        if lora:
            base = gguf_cache.ensure_base_gguf(
                resolved, base_type, on_progress=steps.step("base model")
            )
            _link(base, tmp / f"base-{base_type}.gguf")
            adapter = gguf_cache.ensure_lora_gguf(name, on_progress=steps.step("LoRA adapter"))
            _link(adapter, tmp / adapter.name)
        result.template_note = _write_texts(tmp, entry, resolved, types, base_type, lora)
        result.files = [_describe(f) for f in sorted(tmp.iterdir()) if not f.name.startswith(".")]
        result.timings = steps.timings
        _write_manifest(tmp, entry, resolved, result)
        old = move_aside(target) if target.exists() else None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    if on_progress is not None:
        on_progress(1.0, f"exported to {target}")
    return result


def export_folder(name: str, out_dir: Path | None = None) -> Path:
    """The folder an export of ``name`` goes to: ``out_dir``, else ``exports/<name>-gguf``."""
    return Path(out_dir) if out_dir else paths.subdir("exports") / f"{name}-gguf"


def _merged_files(name: str, types: tuple[str, ...], tmp: Path, steps: _Steps) -> None:
    """Merge with PEFT into a hidden folder, then convert (and quantize) each type."""
    from adapters.export.hf import export_merged

    hf_dir = tmp / ".merged-hf"
    steps.step("PEFT merge")(-1.0, "merging the adapter into its base model")
    export_merged(name, out_dir=hf_dir)
    # The K-quants are made from the F16 file, as llama.cpp's own workflow does.
    f16 = tmp / (f"{name}-f16.gguf" if "f16" in types else ".merged-f16.gguf")
    if _needs_f16(types):
        gguf_cache.convert_model(hf_dir, f16, "f16", steps.step("merged f16"))
    for t in (t for t in types if t != "f16"):
        out, progress = tmp / f"{name}-{t}.gguf", steps.step(f"merged {t}")
        if t in QUANTIZER_TYPES:
            llama_tools.quantize(f16, out, t, progress)
        else:
            gguf_cache.convert_model(hf_dir, out, t, progress)
    if "f16" not in types:
        f16.unlink(missing_ok=True)
    shutil.rmtree(hf_dir)


def _needs_f16(types: tuple[str, ...]) -> bool:
    return "f16" in types or any(t in QUANTIZER_TYPES for t in types)


class _Steps:
    """Turns per-step converter progress into one overall fraction, timing each step."""

    def __init__(self, on_progress: Progress | None, total: int):
        self.on_progress, self.total, self.done = on_progress, max(total, 1), -1
        self.timings: dict[str, float] = {}
        self._current, self._started = "", time.perf_counter()

    def step(self, label: str) -> Progress:
        now = time.perf_counter()
        if self._current:
            self.timings[self._current] = round(now - self._started, 2)
        self.done, self._current, self._started = self.done + 1, label, now
        index, best = self.done, [0.0]

        def report(fraction: float, message: str) -> None:
            self.timings[label] = round(time.perf_counter() - self._started, 2)
            best[0] = max(best[0], fraction)  # "-1": a line without a percentage
            if self.on_progress is not None:
                overall = (index + best[0]) / self.total
                self.on_progress(
                    min(overall, 0.99), f"[{index + 1}/{self.total}] {label}: {message}"
                )

        report(0.0, "starting")
        return report


def _write_texts(tmp: Path, entry, resolved, types, base_type: str, lora: bool) -> str:
    """Modelfile(s) and README; returns why there is no TEMPLATE ("" when there is one)."""
    from transformers import AutoTokenizer

    from adapters.export import modelfile as mf

    has_tok = (entry.path / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(
        entry.path if has_tok else resolved.path, trust_remote_code=False
    )
    try:
        template, note = mf.go_template(mf.chat_pieces(tokenizer)), ""
    except mf.TemplateNotExpressible as err:
        template, note = None, str(err)
    system = (entry.manifest.get("data") or {}).get("system_prompt")
    common = {"template": template, "stops": mf.stop_tokens(tokenizer), "system": system}
    files = {}
    if types:
        main = "q8_0" if "q8_0" in types else types[0]
        files["Modelfile"] = mf.modelfile(f"{entry.name}-{main}.gguf", **common)
    if lora:
        lora_name = f"{entry.name}-lora-{gguf_cache.LORA_TYPE}.gguf"
        files["Modelfile.lora"] = mf.modelfile(  # the merged Modelfile is Ollama's default
            f"base-{base_type}.gguf", adapter_file=lora_name, **common
        )
    for fname, text in files.items():
        (tmp / fname).write_text(text)
    ggufs = sorted(p.name for p in tmp.glob("*.gguf"))
    (tmp / "README.md").write_text(readme(entry.name, ggufs, list(files), note))
    return note


def _replaceable(target: Path) -> bool:
    """Whether ``target`` is an empty folder or a GGUF export written here (its manifest)."""
    if not target.is_dir():
        return False
    if not any(target.iterdir()):
        return True
    try:
        return "llama_cpp_python" in json.loads((target / "manifest.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def _write_manifest(tmp: Path, entry, resolved, result: GgufExport) -> None:
    info = {
        "format": FORMAT,
        "adapter": entry.name,
        "adapter_hash": entry.adapter_hash,
        "base_model": resolved.to_dict(),
        "llama_cpp_python": llama_tools.LLAMA_CPP_PYTHON,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "timings_s": result.timings,
        "template_note": result.template_note,
        "files": [asdict(f) for f in result.files],
        "release_gate": asdict(entry_status(entry)),
    }
    (tmp / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")


def _describe(path: Path) -> ExportedFile:
    kind = (
        "modelfile"
        if path.name.startswith("Modelfile")
        else "readme"
        if path.suffix == ".md"
        else "base"
        if path.name.startswith("base-")
        else "lora"
        if "-lora-" in path.name
        else "merged"
    )
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return ExportedFile(path.name, kind, path.stat().st_size, h.hexdigest())


def _link(src: Path, dst: Path) -> None:
    """Hard-link a cached file into the export (a copy across file systems)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def move_aside(folder: Path) -> Path:
    from adapters.export.hf import move_aside as move_aside

    return move_aside(folder)
