"""`python -m adapters export-gguf NAME`: GGUF files, an Ollama Modelfile and a README.

llama.cpp's converters say a line per tensor; those lines go to a log beside the export
(``exports/<name>-gguf.log``, replaced by each export) and, with ``--verbose``, to stderr too.
Otherwise stderr shows one progress line, redrawn on a terminal, one line per step elsewhere
(a log file, CI, the app's subprocess); a failed step is one sentence naming the log.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_NEW_TOKENS = 2048  # --verify's answer budget at most, as python -m eval's


def add_arguments(p) -> None:
    p.add_argument("name", help="the adapter on the shelf")
    p.add_argument(
        "--types",
        default="f16,q8_0",
        help="merged-model types, comma-separated: f16, q8_0, q4_k_m, q5_k_m, bf16, f32 "
        "('none' for only the LoRA pair)",
    )
    p.add_argument(
        "--lora", action="store_true", help="also write base GGUF + LoRA GGUF (unmerged)"
    )
    p.add_argument("--base-type", default="q8_0", help="the base file's type for --lora")
    p.add_argument("--out", type=Path, help="export folder (default: exports/<name>-gguf)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export")
    p.add_argument(
        "--verify",
        type=int,
        default=0,
        metavar="N",
        help="then answer the first N golden prompts in llama.cpp and PyTorch and compare",
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="answer budget for --verify")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also print llama.cpp's own lines (always kept in <export folder>.log)",
    )


def main(args) -> int:
    from adapters.export.gguf import export_folder, export_gguf
    from adapters.export.llama_tools import LlamaToolsError
    from adapters.shelf.gate_rules import warning_for
    from adapters.shelf.store import Shelf

    golden = _golden()
    if not 0 <= args.verify <= len(golden):  # said before the minutes of work, as the warning
        raise ValueError(
            f"--verify must be from 0 to {len(golden)} golden prompts, not {args.verify}"
        )
    if args.verify and not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(
            f"--max-new-tokens must be from 1 to {MAX_NEW_TOKENS}, not {args.max_new_tokens}"
        )
    entry = Shelf().get(args.name)
    warning = warning_for(entry) if entry.ok else ""  # broken ones fail below
    if warning:  # said before the minutes of work
        print(f"warning: {warning}; exporting anyway", file=sys.stderr)
    types = (
        ()
        if args.types.strip().lower() == "none"
        else tuple(t.strip() for t in args.types.split(",") if t.strip())
    )
    folder = export_folder(args.name, args.out)
    with _progress(folder.with_name(folder.name + ".log"), args.verbose) as progress:
        try:
            result = export_gguf(
                args.name,
                types,
                lora=args.lora,
                base_type=args.base_type,
                out_dir=args.out,
                overwrite=args.overwrite,
                on_progress=progress,
            )
        except LlamaToolsError as err:  # tools missing or a failed step: not the user's input
            progress.end()
            where = f"; llama.cpp's output is in {progress.log}" if progress.written else ""
            print(f"error: {err}{where}", file=sys.stderr)
            return 1
        progress.end()
        print(f"llama.cpp's output is in {progress.log}", file=sys.stderr)
    report = {
        "folder": str(result.folder),
        "timings_s": result.timings,
        "gate_warning": result.gate_warning,
        "files": [{"file": f.file, "bytes": f.bytes, "sha256": f.sha256} for f in result.files],
    }
    if args.verify:
        report["verify"] = _verify(result.folder, golden[: args.verify], args.max_new_tokens)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"exported to {result.folder}")
    if result.gate_warning:
        print(f"warning: {result.gate_warning}")
    for f in result.files:
        print(f"  {f.file:40s} {f.bytes / 2**20:9.1f} MiB  sha256 {f.sha256}")
    if result.template_note:
        print(f"note: no TEMPLATE in the Modelfile: {result.template_note}")
    for row in report.get("verify", []):
        print(
            f"  {row['files']}: {row['identical']}/{row['prompts']} answers identical to "
            f"PyTorch, first divergence at tokens {row['first_divergence']}, "
            f"{row['stopped']}/{row['prompts']} stopped at end-of-turn, tokenizer same on "
            f"{row['same_tokens']}/{row['prompts']}"
        )
    return 0


class _Progress:
    """Export progress: every message into ``log``; on stderr a redrawn line on a terminal,
    else the first line of each step (every line with ``verbose``)."""

    def __init__(self, log: Path, verbose: bool):
        self.log, self.verbose, self.written = log, verbose, False
        self._file, self._step, self._redrawn = None, "", False
        self._terminal = sys.stderr.isatty()

    def __call__(self, fraction: float, message: str) -> None:
        step, _, line = message.partition(": ")
        if not step.startswith("["):  # the closing "exported to ...": said on stdout
            return
        if self._file is None:  # opened at the first step, after every refusal
            self._file = self.log.open("w", encoding="utf-8")
            self.written = True
        print(message, file=self._file, flush=True)
        if self.verbose:
            print(message, file=sys.stderr, flush=True)
        elif self._terminal:
            print(f"\r{fraction:4.0%} {message[:100]:100s}", end="", file=sys.stderr, flush=True)
            self._redrawn = True
        elif step != self._step:
            print(message, file=sys.stderr, flush=True)
        self._step = step

    def end(self) -> None:
        """End the redrawn line, so what follows starts on a line of its own."""
        if self._redrawn:
            print(file=sys.stderr)
            self._redrawn = False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@contextmanager
def _progress(log: Path, verbose: bool):
    """A :class:`_Progress`; without ``verbose``, transformers' own bars (the merge's "Loading
    weights", "Writing model shards") are off meanwhile: the step line says what is done."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    if not verbose:
        hf_logging.disable_progress_bar()
    progress = _Progress(log, verbose)
    try:
        yield progress
    finally:
        progress.close()
        if bars:
            hf_logging.enable_progress_bar()


def _golden() -> list[str]:
    """The golden prompts --verify answers the first of."""
    lines = (ROOT / "assets" / "golden.jsonl").read_text().splitlines()
    return [json.loads(line)["prompt"] for line in lines if line]


def _verify(folder: Path, prompts: list[str], max_new: int) -> list[dict]:
    from dataclasses import asdict

    from adapters.export.verify import verify_export

    rows = verify_export(folder, prompts, max_new_tokens=max_new)
    return [{**asdict(r), "share_identical": round(r.share_identical, 3)} for r in rows]
