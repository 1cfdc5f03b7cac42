"""Proof that a GGUF export runs right: llama.cpp's greedy answers against PyTorch's.

Each file of an export (each merged GGUF alone, and the base GGUF with the LoRA GGUF applied
on top) answers the same prompts greedily in llama.cpp, through its own ``llama-server`` (one
short-lived process per file), from the very token ids PyTorch is given; PyTorch runs the base with
the adapter merged, in float32. Reported per file: the share of identical answers, where the others
first diverge, whether llama.cpp's own tokenizer gives the same ids, and how many answers ended at
an end-of-turn token of the file (its metadata, not ours) within the budget.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.export.llama_tools import LlamaToolsError
from core.llama_cpp import one_shot, process
from core.llama_cpp.binaries import missing_reason, server_binary


@dataclass
class Agreement:
    """How one GGUF file (or base + LoRA pair) answered against PyTorch."""

    files: str
    prompts: int = 0
    identical: int = 0
    first_divergence: list = field(default_factory=list)  # token index per differing answer
    stopped: int = 0  # answers that ended at an end-of-turn token within the budget
    reference_stopped: int = 0
    same_tokens: int = 0  # prompts llama.cpp tokenizes to exactly PyTorch's ids
    seconds: float = 0.0

    @property
    def share_identical(self) -> float:
        return self.identical / self.prompts if self.prompts else 0.0


def verify_export(folder: Path, prompts: list[str], *, max_new_tokens: int = 64) -> list[Agreement]:
    """Greedy answers of every GGUF in ``folder`` against the merged PyTorch model.

    Raises:
        ValueError: the folder is not a GGUF export; LlamaToolsError: llama-server not built.
    """
    folder = Path(folder)
    manifest = _manifest(folder)
    binary = server_binary()
    if binary is None:
        raise LlamaToolsError(f"checking an export needs llama.cpp's server: {missing_reason()}")
    tokenizer, model, system = _reference(manifest)
    from core.templates import end_of_turn_ids, render_prompt

    stops = set(end_of_turn_ids(tokenizer))
    texts = [
        render_prompt(
            tokenizer,
            ([{"role": "system", "content": system}] if system else [])
            + [{"role": "user", "content": p}],
        )
        for p in prompts
    ]
    ids = [tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    reference = [_torch_greedy(model, x, max_new_tokens, stops) for x in ids]
    results = []
    for label, model_file, lora in _targets(folder, manifest):
        loras = [folder / lora] if lora else []
        with (
            tempfile.TemporaryDirectory(prefix="tunedesk-verify-") as logs,
            process.LlamaServerProcess(
                binary,
                folder / model_file,
                loras,
                slots=1,
                ctx_per_slot=1024,
                threads=2,
                log=Path(logs) / "llama-server.log",
            ) as server,
        ):
            result, start = Agreement(label, prompts=len(ids)), time.perf_counter()
            result.reference_stopped = sum(stopped for _, stopped in reference)
            for text, x, (want, _) in zip(texts, ids, reference, strict=True):
                result.same_tokens += one_shot.tokenize(server, text) == x
                got, stopped = one_shot.greedy(server, x, max_new_tokens, lora=0 if lora else None)
                result.stopped += stopped
                if got == want:
                    result.identical += 1
                else:
                    result.first_divergence.append(_first_difference(got, want))
            result.seconds = round(time.perf_counter() - start, 1)
        results.append(result)
    return results


def _first_difference(a: list[int], b: list[int]) -> int:
    """Index of the first differing token (the shorter length when one extends the other)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{folder} is not a GGUF export (manifest.json: {err})") from None
    if manifest.get("format") != "tunedesk-gguf-export/1":
        raise ValueError(f"{folder} is not a TuneDesk GGUF export")
    return manifest


def _reference(manifest: dict):
    """Tokenizer, the merged float32 PyTorch model, and the training system prompt."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.export.preconditions import checked_adapter

    entry, resolved = checked_adapter(manifest["adapter"])
    if entry.adapter_hash != manifest.get("adapter_hash"):
        raise ValueError(f"adapter {entry.name!r} changed since this export; export it again")
    has_tok = (entry.path / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(entry.path if has_tok else resolved.path)
    base = AutoModelForCausalLM.from_pretrained(resolved.path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, entry.path).merge_and_unload().eval()
    return tokenizer, model, (entry.manifest.get("data") or {}).get("system_prompt")


def _targets(folder: Path, manifest: dict) -> list[tuple[str, str, str | None]]:
    kinds = {f["file"]: f["kind"] for f in manifest["files"]}
    out = [(name, name, None) for name, kind in sorted(kinds.items()) if kind == "merged"]
    base = next((n for n, k in kinds.items() if k == "base"), None)
    lora = next((n for n, k in kinds.items() if k == "lora"), None)
    if base and lora:
        out.append((f"{base} + {lora}", base, lora))
    return out


def _torch_greedy(model, ids: list[int], max_new: int, stops: set[int]) -> tuple[list[int], bool]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=sorted(stops),
            pad_token_id=sorted(stops)[0],
        )[0, len(ids) :].tolist()
    stopped = bool(out) and out[-1] in stops
    return (out[:-1] if stopped else out), stopped
