"""llama.cpp's own tools: the converters extracted from the llama-cpp-python source archive,
and the ``llama-quantize`` executable built from it.

``make setup`` extracts ``convert_hf_to_gguf.py``, ``convert_lora_to_gguf.py``, ``gguf-py/`` and
``conversion/`` into ``<venv>/llama.cpp/`` (:func:`core.llama_cpp.binaries.tools_dir`); ``make
llama`` builds ``llama-server`` and ``llama-quantize`` from the same archive (``make run`` starts
that build in the background). The converters run in a child process with ``PYTHONPATH`` on the
extracted ``gguf-py`` -- never the installed ``gguf`` package, whose version differs -- and
their log and progress lines, like the quantizer's, stream to ``on_progress``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from core.llama_cpp.binaries import LLAMA_CPP_PYTHON, executable, missing_reason, tools_dir

CONVERTERS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py")
# Output types of convert_hf_to_gguf.py itself; the K-quants come from the quantizer.
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
QUANTIZER_TYPES = {"q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M"}  # ours -> llama-quantize's names
OUTTYPES = CONVERTER_TYPES + tuple(QUANTIZER_TYPES)

Progress = Callable[[float, str], None]  # (fraction of the current step in 0..1, message)
_PERCENT = re.compile(r"(\d{1,3})%\|")  # tqdm's "Writing:  42%|####"


__all__ = ["LLAMA_CPP_PYTHON", "tools_dir"]  # re-exported: the export code names them here


class LlamaToolsError(RuntimeError):
    """llama.cpp's converters or quantizer are missing, or a conversion failed; says why."""


def converter(script: str) -> Path:
    """The path of one extracted converter script.

    Raises:
        LlamaToolsError: the converters are not set up (one sentence saying how to fix it).
    """
    root = tools_dir()
    path = root / script
    if (
        not path.is_file()
        or not (root / "gguf-py" / "gguf").is_dir()
        or not (root / "conversion").is_dir()
    ):
        raise LlamaToolsError(
            f"llama.cpp's converters are not set up in {root}; run `make setup` (it extracts them "
            f"from llama-cpp-python=={LLAMA_CPP_PYTHON}'s source archive)"
        )
    return path


def run_converter(script: str, args: list[str], on_progress: Progress | None = None) -> None:
    """Run a llama.cpp converter in a child process, streaming its lines to ``on_progress``.

    Raises:
        LlamaToolsError: the converter exited non-zero; the message quotes its error lines.
    """
    root = tools_dir()
    path = converter(script)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "gguf-py"), str(root)]),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("NO_LOCAL_GGUF", None)  # unset, the converters put the gguf-py beside them first
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(
        [sys.executable, str(path), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    try:
        for line in _lines(proc.stdout):
            tail.append(line)
            if on_progress is not None:
                match = _PERCENT.search(line)
                on_progress(int(match.group(1)) / 100 if match else -1.0, line)
    finally:
        proc.stdout.close()
        code = proc.wait()
    if code != 0:
        raise LlamaToolsError(f"{script} failed: {_error_summary(list(tail))}")


def quantize(
    src: Path, dst: Path, outtype: str, on_progress: Progress | None = None, threads: int = 0
) -> None:
    """Quantize a GGUF file with llama.cpp's ``llama-quantize`` (Q4_K_M, Q5_K_M).

    Its lines (one per tensor, ``[ 12/ 272] ...``) go to ``on_progress`` while it runs.

    Raises:
        LlamaToolsError: an unknown type, no quantizer built, or a failed quantization.
    """
    if outtype not in QUANTIZER_TYPES:
        raise LlamaToolsError(
            f"unknown quantization {outtype!r}; choose one of {sorted(QUANTIZER_TYPES)}"
        )
    binary = executable("llama-quantize")
    if binary is None:
        raise LlamaToolsError(
            f"{outtype} needs llama.cpp's quantizer: {missing_reason('llama-quantize')}"
        )
    tail: deque[str] = deque(maxlen=20)
    proc = subprocess.Popen(
        [
            str(binary),
            str(src),
            str(dst),
            QUANTIZER_TYPES[outtype],
            str(threads or os.cpu_count() or 1),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        for line in _lines(proc.stdout):
            tail.append(line)
            match = re.match(r"\[\s*(\d+)/\s*(\d+)\]", line)
            if on_progress is not None:
                on_progress(int(match.group(1)) / int(match.group(2)) if match else -1.0, line)
    finally:
        proc.stdout.close()
        code = proc.wait()
    if code != 0:
        raise LlamaToolsError(
            f"llama.cpp could not quantize {src.name} to {outtype} (exit {code}): "
            f"{' | '.join(list(tail)[-3:]) or 'no output'}"
        )


def _lines(stream):
    """Yield text lines split on ``\\n`` and on tqdm's ``\\r`` redraws."""
    buf = b""
    while chunk := stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096):
        buf += chunk
        *done, buf = re.split(rb"[\r\n]", buf)
        for raw in done:
            if raw.strip():
                yield raw.decode("utf-8", "replace").rstrip()
    if buf.strip():
        yield buf.decode("utf-8", "replace").rstrip()


def _error_summary(lines: list[str]) -> str:
    """The converter's own error lines (or its last line), in one sentence."""
    errors = [ln.split(":", 2)[-1].strip() for ln in lines if ln.startswith("ERROR:")]
    if not errors:
        # A traceback ends with "SomeError: message"; report that line.
        errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln)][
            -1:
        ] or lines[-1:]
    return "; ".join(dict.fromkeys(errors)) or "no output"
