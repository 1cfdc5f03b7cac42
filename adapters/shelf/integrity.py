"""Do an adapter's weights still match its manifest? Size and hash, checked on every use.

The manifest records ``adapter_hash`` (sha256 of ``adapter_model.safetensors``, 16 hex) and,
for adapters saved since this check exists, ``adapter_bytes``. A file changed after it was
saved (a bit flip, a bad copy, a hand edit) no longer matches, and the shelf lists the adapter
broken; the model session asks the same question before each use, so an adapter damaged
after it was loaded is not served from memory.

Hashing a few MB costs milliseconds, but the shelf lists every adapter on each refresh and
the session checks before each answer: a digest is cached per file identity (inode, size,
modification and change times), so only a file that changed is read again.
"""

from __future__ import annotations

import threading
from pathlib import Path

from core.hashing import file_hash

_CACHE: dict[tuple, str] = {}  # (path, inode, size, mtime_ns, ctime_ns) -> digest
_CACHE_MAX = 512
_LOCK = threading.Lock()


def weights_problem(weights: Path, manifest: dict) -> str:
    """Why ``weights`` does not match ``manifest`` (size, then hash); empty when it does.

    Manifests without ``adapter_hash`` (a PEFT folder imported without one) have nothing to
    compare and pass.
    """
    want_hash = str(manifest.get("adapter_hash") or "")
    want_bytes = manifest.get("adapter_bytes")
    try:
        size = weights.stat().st_size
    except OSError as err:
        return f"{weights.name} cannot be read ({err.strerror or err})"
    if isinstance(want_bytes, int) and not isinstance(want_bytes, bool) and size != want_bytes:
        return (
            f"{weights.name} is {size:,} bytes but was saved as {want_bytes:,}: the file "
            "changed after it was saved; restore it or delete the adapter"
        )
    if not want_hash:
        return ""
    got = cached_hash(weights)
    if got != want_hash:
        return (
            f"{weights.name} does not match its manifest (sha256 {got}, saved as "
            f"{want_hash}): the file changed after it was saved; restore it or delete the adapter"
        )
    return ""


def cached_hash(path: Path) -> str:
    """:func:`core.hashing.file_hash`, read again only when the file changed."""
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    digest = file_hash(path)
    with _LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = digest
    return digest
