"""What was measured or checked about one llama.cpp build on this machine, kept beside the binary.

Each fact file (a JSON object) holds one entry per machine key: the binary's path, size and
time, the CPU's flags and this boot's id, so a rebuilt llama.cpp, another machine or a reboot
asks again. Writes are atomic and best effort: a read-only build folder asks again next time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def machine_key(binary: Path) -> str:
    """What a stored fact holds for: this build of the binary, this CPU, this boot."""
    stat = Path(binary).stat()
    parts = [str(Path(binary).resolve()), str(stat.st_size), str(stat.st_mtime_ns)]
    for source in ("/proc/cpuinfo", "/proc/sys/kernel/random/boot_id"):
        try:
            text = Path(source).read_text()
        except OSError:
            text = ""
        flags = next((line for line in text.splitlines() if line.startswith("flags")), text)
        parts.append(flags.strip())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def recalled(binary: Path, file: str) -> dict | None:
    """The entry ``file`` (beside ``binary``) holds for this machine, or None."""
    try:
        stored = json.loads((Path(binary).parent / file).read_text())
    except (OSError, ValueError):
        return None
    entry = stored.get(machine_key(binary)) if isinstance(stored, dict) else None
    return entry if isinstance(entry, dict) else None


def keep(binary: Path, file: str, entry: dict) -> None:
    """Store ``entry`` for this machine in ``file`` beside ``binary``, keeping other machines'."""
    path = Path(binary).parent / file
    try:
        stored = json.loads(path.read_text())
        stored = stored if isinstance(stored, dict) else {}
    except (OSError, ValueError):
        stored = {}
    stored[machine_key(binary)] = entry
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(stored, indent=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
