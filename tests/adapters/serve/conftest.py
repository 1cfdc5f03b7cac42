"""Fixtures for the serving tests: a tiny model with three seeded adapters on the shelf."""

from __future__ import annotations

import pytest
from serve_helpers import put_adapters


@pytest.fixture
def session(home, varied_dir):
    """A float32 session on the tiny llama with adapters a, b, c on the shelf."""
    from adapters.session import ModelSession

    put_adapters(home, varied_dir)
    return ModelSession(str(varied_dir), dtype="float32")
