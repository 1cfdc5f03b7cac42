"""llama.cpp's own tools: the converters extracted from the llama-cpp-python source archive,
and the quantizer in its built bindings.

``make setup`` downloads ``llama-cpp-python==0.3.36`` once and extracts ``convert_hf_to_gguf.py``, ``convert_lora_to_gguf.py``, ``gguf-py/`` and
``conversion/`` into ``<venv>/llama.cpp/`` (or ``$TUNEDESK_LLAMA_CPP_DIR``); ``make llama``
builds the bindings from the same archive (``make run`` starts it in the background). Converter
and runtime therefore come from the same llama.cpp commit. The converters run in a child process
with ``PYTHONPATH`` on the extracted ``gguf-py`` -- never the installed ``gguf`` package, whose
version differs -- and their log and progress lines stream to ``on_progress``.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
CONVERTERS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py")
# Output types of convert_hf_to_gguf.py itself; the K-quants come from the quantizer.
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
QUANTIZER_TYPES = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M"}
OUTTYPES = CONVERTER_TYPES + tuple(QUANTIZER_TYPES)

Progress = Callable[[float, str], None]  # (fraction of the current step in 0..1, message)
_PERCENT = re.compile(r"(\d{1,3})%\|")  # tqdm's "Writing:  42%|####"


class LlamaToolsError(RuntimeError):
    """llama.cpp's converters or bindings are missing, or a conversion failed; says why."""


def tools_dir() -> Path:
    """Where the extracted converters live: ``$TUNEDESK_LLAMA_CPP_DIR`` or ``<venv>/llama.cpp``."""
    return Path(os.environ.get("TUNEDESK_LLAMA_CPP_DIR") or Path(sys.prefix) / "llama.cpp")


def converter(script: str) -> Path:
    """The path of one extracted converter script.

    Raises:
        LlamaToolsError: the converters are not set up (one sentence saying how to fix it).
    """
    root = tools_dir()
    path = root / script
    if not path.is_file() or not (root / "gguf-py" / "gguf").is_dir() or not (root / "conversion").is_dir():
        raise LlamaToolsError(
            f"llama.cpp's converters are not set up in {root}; run `make setup` (it extracts them "
            f"from llama-cpp-python=={LLAMA_CPP_PYTHON}'s source archive)")
    return path


def bindings():
    """The ``llama_cpp`` module, or one sentence saying how to install it."""
    try:
        import llama_cpp
    except ImportError as err:
        raise LlamaToolsError(
            f"llama.cpp's Python bindings are not installed ({err}); `make llama` builds them "
            f"(llama-cpp-python=={LLAMA_CPP_PYTHON}, about 7 minutes on 2 cores; `make run` starts "
            "that build in the background)") from None
    return llama_cpp


_DEFAULT_PARAMS_LOCK = threading.Lock()


def amx_cpu() -> bool:
    """Whether this CPU has AMX (Intel Sapphire Rapids and later): llama.cpp then repacks
    quantized weights for its AMX kernels unless told not to."""
    try:
        return "amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def open_model(path: Path, **kwargs):
    """``llama_cpp.Llama(path, **kwargs)``, safe on CPUs with AMX.

    llama.cpp's AMX matmul crashes the process (segmentation fault) decoding Q8_0 weights:
    seen here on an Intel Xeon with ``amx_int8`` on every Q8_0 SmolLM2 file, the same bug as
    llama.cpp issue #20824. On such CPUs the model is loaded without llama.cpp's extra buffer
    types (``use_extra_bufts = False``, which the bindings do not expose as an argument): the
    weights stay in plain CPU buffers and the AVX-512 kernels compute, as on every other CPU.
    ``TUNEDESK_LLAMA_AMX=1`` keeps AMX on.

    Raises:
        LlamaToolsError: no bindings.
    """
    llama_cpp = bindings()
    if not amx_cpu() or os.environ.get("TUNEDESK_LLAMA_AMX") == "1":
        return llama_cpp.Llama(str(path), **kwargs)
    lib = llama_cpp.llama_cpp  # Llama() asks this module for its default parameters
    with _DEFAULT_PARAMS_LOCK:
        original = lib.llama_model_default_params

        def without_extra_buffers():
            params = original()
            params.use_extra_bufts = False
            return params

        lib.llama_model_default_params = without_extra_buffers
        try:
            return llama_cpp.Llama(str(path), **kwargs)
        finally:
            lib.llama_model_default_params = original


def run_converter(script: str, args: list[str], on_progress: Progress | None = None) -> None:
    """Run a llama.cpp converter in a child process, streaming its lines to ``on_progress``.

    Raises:
        LlamaToolsError: the converter exited non-zero; the message quotes its error lines.
    """
    root = tools_dir()
    path = converter(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "gguf-py"), str(root)]),
           "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("NO_LOCAL_GGUF", None)  # unset, the converters put the gguf-py beside them first
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen([sys.executable, str(path), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=root)
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


def quantize(src: Path, dst: Path, outtype: str, on_progress: Progress | None = None, threads: int = 0) -> None:
    """Quantize a GGUF file with llama.cpp's ``llama_model_quantize`` (Q4_K_M, Q5_K_M).

    llama.cpp's log lines (one per tensor, ``[ 12/ 272] ...``) go to ``on_progress`` while it
    runs instead of flooding stderr.

    Raises:
        LlamaToolsError: an unknown type, missing bindings, or a failed quantization.
    """
    if outtype not in QUANTIZER_TYPES:
        raise LlamaToolsError(f"unknown quantization {outtype!r}; choose one of {sorted(QUANTIZER_TYPES)}")
    llama_cpp = bindings()
    from llama_cpp import _logger

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANTIZER_TYPES[outtype])
    params.nthread = threads or (os.cpu_count() or 1)

    @llama_cpp.llama_log_callback
    def forward(level, text, user_data):
        line = text.decode("utf-8", "replace").strip()
        match = re.match(r"\[\s*(\d+)/\s*(\d+)\]", line)
        if on_progress is not None and line:
            on_progress(int(match.group(1)) / int(match.group(2)) if match else -1.0, line)

    llama_cpp.llama_log_set(forward, ctypes.c_void_p(0))
    try:
        code = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    finally:  # the bindings' own logger again (Llama(verbose=...) relies on it)
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    if code != 0:
        raise LlamaToolsError(f"llama.cpp could not quantize {src.name} to {outtype} (code {code})")


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
        errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln)][-1:] or lines[-1:]
    return "; ".join(dict.fromkeys(errors)) or "no output"
