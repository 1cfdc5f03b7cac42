"""adapters.shelf.integrity: an adapter's weights against its manifest (size, then sha256)."""

from __future__ import annotations

import os
import time

from adapters.shelf.integrity import cached_hash, weights_problem
from core.hashing import file_hash


def test_size_then_hash_then_a_cached_digest(tmp_path):
    weights = tmp_path / "adapter_model.safetensors"
    weights.write_bytes(b"\x01" * 1000)
    manifest = {"adapter_hash": file_hash(weights), "adapter_bytes": 1000}
    assert weights_problem(weights, manifest) == ""
    weights.write_bytes(b"\x01" * 999 + b"\x02")  # same size, one byte changed
    assert "does not match its manifest" in weights_problem(weights, manifest)
    weights.write_bytes(b"\x01" * 1001)
    assert weights_problem(weights, manifest).startswith(
        "adapter_model.safetensors is 1,001 bytes but was saved as 1,000"
    )
    assert weights_problem(weights, {}) == ""  # nothing recorded, nothing to compare


def test_the_cache_notices_a_rewrite_that_keeps_size_and_mtime(tmp_path):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"a" * 64)
    first = cached_hash(weights)
    st = weights.stat()
    time.sleep(0.05)  # file times tick coarsely (a few ms): let the change time move
    weights.write_bytes(b"b" * 64)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # a copy that kept the old time
    assert cached_hash(weights) == file_hash(weights) != first  # the change time still moved
