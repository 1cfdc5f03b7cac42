"""Fixtures for the serving tests: a tiny model with three seeded adapters on the shelf."""

from __future__ import annotations

import pytest
from serve_helpers import put_adapters


@pytest.fixture
def session(home, varied_dir):
    """A float32 session on the tiny llama with adapters a, b, c on the shelf."""
    from inference.session import ModelSession

    put_adapters(home, varied_dir)
    return ModelSession(str(varied_dir), dtype="float32")


@pytest.fixture(scope="session")
def realtok_dir(default_model_dir, tmp_path_factory):
    """A 2-layer llama with the default model's tokenizer and chat template (llama.cpp's
    converter refuses the byte-level BPE the other tiny models use), weights large enough
    that greedy answers are varied text."""
    from llama_run import tiny_realtok_model

    return tiny_realtok_model(default_model_dir.path, tmp_path_factory.mktemp("tiny-realtok"))
