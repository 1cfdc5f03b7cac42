"""One llama-server for the whole test session: the GGUF conversions (base f32 and three LoRAs)
and the server start take about 17 s on 2 cores, so the modules here share them rather than
each paying for its own. Every test still runs with TUNEDESK_HOME at that shelf's home."""

from __future__ import annotations

import pytest
from serve_helpers import put_adapters


@pytest.fixture(scope="session")
def llama_home(realtok_dir, tmp_path_factory):
    """A home kept for the session with adapters a, b, c on its shelf (so the GGUFs are
    converted once, not per module)."""
    from core.llama_cpp.binaries import missing_reason, server_binary

    if server_binary() is None:
        pytest.skip(missing_reason())
    home = tmp_path_factory.mktemp("llama-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNEDESK_HOME", str(home))
        put_adapters(home, realtok_dir)
    return home


@pytest.fixture(scope="session")
def llama_session(llama_home, realtok_dir):
    """A float32 session on the real-tokenizer tiny llama over that shelf."""
    from inference.session import ModelSession

    return ModelSession(str(realtok_dir), dtype="float32", adapters_dir=llama_home / "adapters")


@pytest.fixture(scope="session")
def llama(llama_session, llama_home):
    """llama-server on f32 GGUFs of that model (made by the export code), adapters a, b, c."""
    from serve.engines import make_llama_engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNEDESK_HOME", str(llama_home))
        # Flash attention off: with it on, a LoRA's greedy answers on this random-weight model part
        # from PyTorch's after 2 tokens (near-tied logits); off, they are PyTorch's token for token.
        engine = make_llama_engine(llama_session, outtype="f32", flash_attn="off")
    yield engine
    engine.close()


@pytest.fixture(autouse=True)
def _in_llama_home(llama_home, monkeypatch):
    """Each test sees the shared shelf's home, as it did when the fixtures were per module."""
    monkeypatch.setenv("TUNEDESK_HOME", str(llama_home))


@pytest.fixture(autouse=True)
def _listeners_end_with_their_test(request):
    """The shared server's list of whom to tell when a new local server starts, as it was before
    the test: an Engines a test made (and its kept warm-up replays) hears of no later test's
    servers. Without this, every earlier test's keeper replayed the shared store's kept warm-ups
    at once into the new server of the kept warm-up test, and their slots overwrote its state."""
    if "llama" not in request.fixturenames:
        yield
        return
    started = request.getfixturevalue("llama").upstreams.started
    before = list(started)
    yield
    started[:] = before
