"""Which engine answers: llama.cpp once llama-server is ready, PyTorch until then and where it
cannot (a GPU, ``pytorch`` chosen, a failed start), and PyTorch for a crowd over mixed adapters
(``auto``); a pinned request gets its engine whatever the load."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.export.llama_tools import LlamaToolsError
from serve.engines import Engines


class _Engine:
    def __init__(self, name):
        self.name, self.label = name, f"{name} engine"

    def close(self, error, wait):
        self.closed = error


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
    assert all(engines.pick() is llama for _ in range(20))  # nothing in flight: llama.cpp
    assert (
        engines.describe()
        == "engine: llama.cpp engine; PyTorch takes crowds of 8+ over mixed adapters"
    )


def test_the_status_line_follows_the_build_and_llama_server_takes_over_unasked(
    monkeypatch, tmp_path
):
    """While `make run`'s build runs, the status line shows its progress; when the binary
    appears llama-server starts and serves with no request and no restart in between."""
    import fcntl

    monkeypatch.delenv("TUNEDESK_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path))
    (tmp_path / "build.log").write_text("[ 12%] Building C object\n[ 47%] Building CXX object\n")
    llama = _Engine("llama.cpp")
    engines = _engines("auto", lambda session, max_queue: llama)
    with open(tmp_path / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the build's flock
        assert "llama-server is being built, 47% done" in engines.describe()  # page first open
        engines.prepare()
        assert "llama-server is being built, 47% done" in engines.describe()
        assert engines.pick().name == "pytorch"
        binary = tmp_path / "build" / "bin" / "llama-server"
        binary.parent.mkdir(parents=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    # the build ended (lock closed): no request, no restart from here on
    deadline = time.time() + 10
    while not engines.describe().startswith("engine: llama.cpp engine") and time.time() < deadline:
        time.sleep(0.1)
    assert engines.describe().startswith("engine: llama.cpp engine")


def test_a_failed_start_leaves_pytorch_serving_with_the_reason(built):
    def factory(session, max_queue):
        raise RuntimeError("the GGUF could not be read")

    engines = _engines("llama.cpp", factory)
    engines.prepare()
    assert engines.pick().name == "pytorch"
    assert engines.describe() == (
        "engine: pytorch engine. llama.cpp cannot serve this model, so PyTorch answers "
        "(the GGUF could not be read)"
    )


@pytest.mark.parametrize(
    "error",
    [
        LlamaToolsError(
            "convert_hf_to_gguf.py failed: NotImplementedError: Architecture "
            "'Qwen9ForCausalLM' not supported!\nTraceback (most recent call last):\n  File x"
        ),
        NotImplementedError("Architecture 'Qwen9ForCausalLM' not supported!" + " padding" * 40),
    ],
)
def test_a_model_llama_cpp_cannot_convert_is_said_in_one_short_sentence(built, error):
    def factory(session, max_queue):
        raise error

    engines = _engines("auto", factory)
    engines.prepare()
    assert engines.pick().name == "pytorch"
    line = engines.describe()
    head = "engine: pytorch engine. llama.cpp cannot serve this model, so PyTorch answers ("
    assert line.startswith(head) and line.endswith(")"), line
    reason = line[len(head) : -1]
    assert "Architecture 'Qwen9ForCausalLM' not supported!" in reason and len(reason) <= 120
    assert "\n" not in line and "Traceback" not in line
    assert "LlamaToolsError" not in line and "NotImplementedError" not in line, line


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


def _ready(choice="auto", mixed_crowd=4):
    engines = Engines(_Session(), choice, llama_factory=None, mixed_crowd=mixed_crowd)
    engines._pytorch, engines._llama = _Engine("pytorch"), _Engine("llama.cpp")
    return engines


def test_a_crowd_over_mixed_adapters_goes_to_pytorch_until_it_has_drained():
    engines = _ready(mixed_crowd=4)
    same = [engines.route(["a"]) for _ in range(6)]  # one adapter: llama-server batches them
    assert {engine.name for engine, _ in same} == {"llama.cpp"}
    crowd = [engines.route([adapter]) for adapter in ("b", None, "a")]
    # "b" meets six "a" on llama-server; then PyTorch takes everyone while it decodes the crowd
    assert [engine.name for engine, _ in crowd] == ["pytorch", "pytorch", "pytorch"]
    assert engines.crowd() == {"llama.cpp": 6, "pytorch": 3}
    for _, release in crowd:
        release()
        release()  # a second call changes nothing
    assert engines.crowd() == {"llama.cpp": 6}
    for _, release in same:
        release()
    assert engines.crowd() == {}


def _route_in_thread(engines, adapter):
    """Route ``adapter`` in a thread (it may wait); returns (thread, result list)."""
    got = []
    thread = threading.Thread(target=lambda: got.append(engines.route([adapter])), daemon=True)
    thread.start()
    return thread, got


def _until(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_below_the_crowd_size_another_adapter_waits_its_turn_for_llama_server():
    engines = _ready(mixed_crowd=4)
    _, first = engines.route(["a"])
    waiter, got = _route_in_thread(engines, "b")  # llama-server decodes "a": "b" waits here
    assert _until(lambda: engines.crowd() == {"llama.cpp": 1, "waiting": 1})
    late, late_got = _route_in_thread(engines, "a")  # "a" again, but "b" came first
    assert _until(lambda: engines.crowd() == {"llama.cpp": 1, "waiting": 2})
    first()
    waiter.join(5)
    assert got[0][0].name == "llama.cpp" and not late_got  # "b"'s turn; "a" waits behind it
    got[0][1]()
    late.join(5)
    assert late_got[0][0].name == "llama.cpp"
    late_got[0][1]()
    assert engines.crowd() == {}


def test_when_the_crowd_forms_the_waiting_requests_go_to_pytorch_together():
    engines = _ready(mixed_crowd=4)
    _, first = engines.route(["a"])
    waiting = [_route_in_thread(engines, adapter) for adapter in ("b", None)]
    assert _until(lambda: engines.crowd() == {"llama.cpp": 1, "waiting": 2})
    engine, release = engines.route(["c"])  # the fourth: a crowd over mixed adapters
    assert engine.name == "pytorch"
    for thread, got in waiting:
        thread.join(5)
        assert got[0][0].name == "pytorch"
        got[0][1]()
    release()
    first()
    assert engines.crowd() == {}


def test_compare_panes_are_routed_together_and_count_as_one_crowd():
    engines = _ready(mixed_crowd=3)
    engine, release = engines.route([None, "a"])
    assert engine.name == "llama.cpp" and engines.crowd() == {"llama.cpp": 2}
    assert engines.route([None, "b"])[0].name == "pytorch"  # 4 in flight, other adapters busy
    release()


def test_a_pin_holds_whatever_the_load_and_a_bad_one_is_refused(monkeypatch):
    engines = _ready(mixed_crowd=2)
    engines.route(["a"])
    assert engines.route(["b"])[0].name == "pytorch"
    assert engines.route(["b"], pin="llama.cpp")[0].name == "llama.cpp"
    assert engines.pick("a", pin="pytorch").name == "pytorch"
    with pytest.raises(ValueError, match="must be one of llama.cpp, pytorch"):
        engines.route(["a"], pin="vllm")
    never = _ready(mixed_crowd=0)
    assert {never.route([a])[0].name for a in ("a", "b", "c", None) * 4} == {"llama.cpp"}
    fixed = _ready("llama.cpp", mixed_crowd=2)
    assert {fixed.route([a])[0].name for a in ("a", "b", "c", None) * 4} == {"llama.cpp"}
    cold = _ready("pytorch")
    cold._llama = None
    with pytest.raises(ValueError, match="llama.cpp does not serve here: set to pytorch"):
        cold.route(["a"], pin="llama.cpp")
    monkeypatch.setenv("TUNEDESK_MIXED_CROWD", "lots")
    with pytest.raises(ValueError, match="TUNEDESK_MIXED_CROWD must be a whole number"):
        Engines(_Session(), "auto")


def test_a_ticket_releases_its_place_in_the_crowd_when_it_ends():
    from serve.interface.ticket import Ticket

    class _Answering(_Engine):
        def __init__(self):
            super().__init__("pytorch")
            self.tickets = []

        def submit(self, messages, adapter, settings=None, stop=None):
            ticket = Ticket(adapter or "base", 3, lambda _: 0)
            self.tickets.append(ticket)
            return ticket

    engines = _ready("pytorch")
    engines._pytorch = _Answering()
    first, second = engines.submit([], "a"), engines.submit([], "b")
    assert engines.crowd() == {"pytorch": 2} and first.engine == "pytorch engine"
    first.finish("stop")
    second.fail(RuntimeError("x"))
    assert engines.crowd() == {}


def test_listeners_hear_of_every_llama_server_that_starts(built):
    class _Upstreams:
        started: list = []

    llama = _Engine("llama.cpp")
    llama.upstreams = _Upstreams()
    heard, early = [], threading.Event()
    engines = _engines("auto", lambda session, max_queue: llama)
    engines.on_llama_start(lambda: (heard.append("early"), early.set()))
    engines.prepare()
    assert early.wait(10) and heard == ["early"]  # the first server
    late = threading.Event()
    engines.on_llama_start(late.set)  # one already serves: told at once
    assert late.wait(10)
    late.clear()
    [new_local] = llama.upstreams.started
    new_local()  # the pool replaced its local server (a longer LoRA list)
    assert late.wait(10)
    deadline = time.monotonic() + 10
    while heard != ["early", "early"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heard == ["early", "early"]
    engines.close()  # a closed engine's listeners hear of no later server
    assert llama.upstreams.started == []
