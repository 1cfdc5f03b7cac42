"""Does llama.cpp's weight repacking work on this machine? Asked once, remembered.

On an Intel Xeon with AMX, llama.cpp repacks quantized weights for its AMX kernels. Where that
works it is the fastest path by far, and a build without AMX (AVX-512/VNNI repacks only) is no
better than ``--no-repack`` (docs/benchmarks.md, "llama.cpp on an AMX Xeon"). Where it does
not work it
takes the server down: a segmentation fault in ``ggml_backend_amx_mul_mat`` at the first
decode (llama.cpp issue #20824, machine-dependent), a SIGILL where the kernel refuses AMX tile
state, or a start that never gets ready. So the first llama-server on an AMX CPU is started with
repacking and asked for a few tokens under short deadlines; if it dies or stalls, it is started
again with ``--no-repack`` and the sentence saying why is logged and kept. The verdict is
stored beside the binary (:mod:`core.llama_cpp.machine_facts`), so a rebuilt llama.cpp, another
machine or a reboot asks again.

``TUNEDESK_LLAMA_AMX=1`` keeps repacking on without asking. ``TUNEDESK_LLAMA_AMX=0`` turns it off
on every CPU, AMX or not: llama-server starts with ``--no-repack`` and its engine's label says so
(``llama.cpp q8_0, --no-repack``), just as after a failed check. That is how a machine without
AMX runs the tests the way an AMX Xeon whose repacking crashes runs them
(``TUNEDESK_LLAMA_AMX=0 make test``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.llama_cpp.machine_facts import keep, recalled

ENV = "TUNEDESK_LLAMA_AMX"
CHECK_READY_SECONDS = 60.0  # a 1B Q8_0 model loads in seconds on 2 cores; a hang is far longer
CHECK_DECODE_SECONDS = 30.0  # 8 tokens take well under a second where repacking works
VERDICT_FILE = ".repack-check.json"


@dataclass(frozen=True)
class Verdict:
    """Whether repacked kernels may be used, and the sentence that says why not."""

    repack: bool
    reason: str = ""


def forced() -> Verdict | None:
    """The operator's choice in ``TUNEDESK_LLAMA_AMX``, if any."""
    value = os.environ.get(ENV)
    if value == "1":
        return Verdict(True)
    if value == "0":
        return Verdict(False, f"{ENV}=0 turns llama.cpp's weight repacking off")
    return None


def remembered(binary: Path) -> Verdict | None:
    """The verdict stored for this binary on this machine, or None if it was never asked."""
    entry = recalled(binary, VERDICT_FILE)
    if entry is None or not isinstance(entry.get("repack"), bool):
        return None
    return Verdict(entry["repack"], str(entry.get("reason", "")))


def remember(binary: Path, verdict: Verdict) -> None:
    """Store ``verdict`` beside the binary (best effort: a read-only build folder asks again)."""
    keep(binary, VERDICT_FILE, {"repack": verdict.repack, "reason": verdict.reason})


def fallback_sentence(problem: str) -> str:
    """What the log and the app say when repacking is turned off after a failed check."""
    return (
        f"llama.cpp's weight repacking (AMX) failed its start-up check on this CPU ({problem}); "
        "llama-server runs with --no-repack here: slower, but it answers"
    )
