"""The shelf drives llama-server: a new adapter is served without a restart and without
dropping the answers in flight; two upstreams share the requests."""

from __future__ import annotations

import threading

from run_helpers import wait_until
from serve_helpers import put_adapters

from core.llama_cpp.process import LlamaServerProcess
from inference.generate import GenerationSettings, compare
from serve.llama_server.upstreams import Upstreams

MSGS = [{"role": "user", "content": "My parcel never came. What now?"}]
GREEDY = GenerationSettings(max_new_tokens=10)


def test_a_new_adapter_is_served_beside_answers_in_flight(llama, llama_session, realtok_dir):
    home = llama_session.adapter_folder("x").parents[1]
    first = llama.upstreams.all[0]
    long = llama.submit(MSGS, "a", GenerationSettings(max_new_tokens=400, min_new_tokens=400))
    reading = iter(long)  # kept: a reader that goes away cancels the answer
    first_part = next(reading)  # in flight on the first server
    replaced = threading.Event()
    llama.upstreams.started.append(replaced.set)  # what re-warms the new server's prompt cache
    put_adapters(
        home, realtok_dir, names=("fresh",), first_seed=7
    )  # trained after the server started
    want = compare(llama_session, MSGS, ["fresh"], GREEDY)[0].text
    assert llama.submit(MSGS, "fresh", GREEDY).text() == want
    second = llama.upstreams.all[0]
    assert second is not first and second.process.running
    assert replaced.is_set()
    llama.upstreams.started.remove(replaced.set)
    rest = "".join(reading)
    assert (
        first_part + rest == long.text()
        and long.finish_reason == "length"
        and long.completion_tokens == 400
    )
    # stopped once its last answer ended: the relay releases its server just after the
    # reader has the answer's end
    assert first.retired
    wait_until(lambda: not first.process.running, "the retired server to stop", timeout=15)
    assert (
        llama.submit(MSGS, "a", GREEDY).text()
        == compare(llama_session, MSGS, ["a"], GREEDY)[0].text
    )


def test_two_upstreams_share_the_requests_and_answer_alike(llama, llama_session, tmp_path):
    local = llama.upstreams.all[0]
    twin = LlamaServerProcess(
        local.process.binary,
        local.process.model,
        local.process.loras,
        slots=4,
        ctx_per_slot=1024,
        threads=1,
        log=tmp_path / "twin.log",
        api_key=local.process.api_key,
    ).start()
    try:
        pool = Upstreams(None, [twin.url, local.url], remote_key=local.process.api_key)
        assert {u.url for u in pool.all} == {twin.url, local.url}
        lora = local.process.loras[0]
        held = [pool.acquire(lora) for _ in range(4)]
        assert {u.url for u in held} == {twin.url, local.url}  # least busy first: both used
        for upstream in held:
            pool.release(upstream)
        assert all(u.inflight == 0 for u in pool.all)
        original, llama.upstreams = llama.upstreams, pool
        try:
            results = [None] * 8
            threads = [
                threading.Thread(
                    target=lambda i=i: results.__setitem__(
                        i, llama.submit(MSGS, "b", GREEDY).text()
                    )
                )
                for i in range(8)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            llama.upstreams = original
        assert results == [compare(llama_session, MSGS, ["b"], GREEDY)[0].text] * 8
    finally:
        twin.stop()
