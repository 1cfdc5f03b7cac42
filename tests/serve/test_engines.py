"""Which engine answers: llama.cpp once llama-server is ready, PyTorch until then and where it
cannot (a GPU, ``pytorch`` chosen, a failed start); the load never moves a request."""

from __future__ import annotations

import threading

import pytest

from serve.engines import Engines


class _Engine:
    def __init__(self, name):
        self.name, self.label = name, f"{name} engine"


class _Session:
    device = "cpu"

    def load(self):
        pass


@pytest.fixture
def built(monkeypatch, tmp_path):
    """llama-server looks built: an executable named by TUNEDESK_LLAMA_SERVER."""
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("TUNEDESK_LLAMA_SERVER", str(binary))
    return binary


def _engines(choice, factory, session=None):
    engines = Engines(session or _Session(), choice, llama_factory=factory)
    engines._pytorch = _Engine("pytorch")  # the scheduler, without a model behind it
    return engines


def test_pytorch_answers_until_llama_server_is_built_then_llama_cpp_does(monkeypatch, built):
    llama, started = _Engine("llama.cpp"), threading.Event()

    def factory(session, max_queue):
        started.wait(10)
        return llama

    engines = _engines("auto", factory)
    monkeypatch.setenv("TUNEDESK_LLAMA_SERVER", str(built.parent / "not-built-yet"))
    assert engines.pick().name == "pytorch" and "not an executable" in engines.describe()
    monkeypatch.setenv("TUNEDESK_LLAMA_SERVER", str(built))  # the background build finished
    assert engines.pick().name == "pytorch"  # starting: nobody waits for it
    assert "starting" in engines.describe()
    started.set()
    engines.prepare()
    assert all(engines.pick() is llama for _ in range(20))  # under any load: one engine
    assert engines.describe() == "engine: llama.cpp engine"


def test_a_failed_start_leaves_pytorch_serving_with_the_reason(built):
    def factory(session, max_queue):
        raise RuntimeError("the GGUF could not be read")

    engines = _engines("llama.cpp", factory)
    engines.prepare()
    assert engines.pick().name == "pytorch"
    assert "failed to start: RuntimeError: the GGUF could not be read" in engines.describe()


def test_pytorch_chosen_or_a_gpu_session_never_start_llama_server(built):
    def factory(session, max_queue):
        raise AssertionError("must not start")

    assert _engines("pytorch", factory).pick().name == "pytorch"
    gpu = _Session()
    gpu.device = "cuda:0"
    engines = _engines("auto", factory, gpu)
    assert engines.pick().name == "pytorch" and "GPU" in engines.describe()


def test_an_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="engine must be one of auto, pytorch, llama.cpp"):
        Engines(_Session(), "vllm")
