"""Every request ends: an answer or an error in OpenAI's shape within the configured bound,
whatever fails inside the PyTorch engine; models it cannot batch (sliding windows) answer
unbatched, as plain ``generate`` does; a request the engine lost times out (504)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from family_models import SERVING_FAMILIES, WINDOW, serving_family_dir
from serve_helpers import api_app

from bench.local_server import serving
from inference.generate import GenerationSettings, compare, encode, session_stop_ids
from inference.session import ModelSession
from serve.engines import Engines

MSGS = [{"role": "user", "content": "Where is my order? I want a refund please."}]
BOUND_S = 5.0  # the idle bound these tests run under: a lost request must end by then


@pytest.fixture(autouse=True)
def short_bound(monkeypatch):
    monkeypatch.setenv("TUNEDESK_ANSWER_IDLE_S", str(BOUND_S))


@pytest.fixture(scope="module", params=SERVING_FAMILIES)
def family_dir(request, tiny_llama_dir, tmp_path_factory):
    return serving_family_dir(request.param, tmp_path_factory.mktemp(request.param), tiny_llama_dir)


def chat(
    url: str, max_tokens: int = 24, timeout: float = 60.0, messages=MSGS, **extra
) -> httpx.Response:
    body = {
        "model": "base",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def warm(session: ModelSession) -> ModelSession:
    """The model loaded and run once: first-use costs (imports, oneDNN packing; seconds on
    a busy machine) do not count against the short bound these tests measure."""
    compare(session, MSGS, [None], GenerationSettings(max_new_tokens=1))
    return session


def plain_generate(folder, session: ModelSession, max_new_tokens: int) -> str:
    """The greedy answer of transformers' own ``generate`` on a freshly loaded model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    inputs = encode(session, [MSGS])
    stops = session_stop_ids(session)
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=stops,
        pad_token_id=session.tokenizer.pad_token_id,
    )[0, inputs["input_ids"].shape[1] :].tolist()
    ids = out[: next((i for i, t in enumerate(out) if t in stops), len(out))]
    return session.tokenizer.decode(ids, skip_special_tokens=True)


def test_a_sliding_window_model_answers_unbatched_as_plain_generate(family_dir, home):
    session = warm(ModelSession(str(family_dir), dtype="float32"))
    engines = Engines(session, "pytorch")
    with serving(api_app(engines)) as url:
        start = time.perf_counter()
        replies = [chat(url), chat(url, stream=False, max_tokens=12)]
        seconds = time.perf_counter() - start
    first = replies[0].json()
    assert replies[0].status_code == 200, first
    assert first["system_fingerprint"] == "pytorch float32, unbatched (sliding-window attention)"
    assert replies[0].headers["X-TuneDesk-Engine"] == first["system_fingerprint"]
    text = first["choices"][0]["message"]["content"]
    assert text == plain_generate(family_dir, session, 24) and len(set(text)) > 3
    assert first["usage"]["prompt_tokens"] > WINDOW  # the window is used
    assert replies[1].json()["choices"][0]["message"]["content"] == plain_generate(
        family_dir, session, 12
    )
    assert seconds < 60


def test_a_cache_the_batch_refuses_is_an_error_in_words_and_the_server_goes_on(
    family_dir, home, monkeypatch
):
    """Gemma 3 / Mistral forced through the batch (the up-front check switched off): the join
    refuses the cache, the request gets a 500 in OpenAI's shape at once, the next one too,
    never a wait (the hang of issue 47)."""
    monkeypatch.setattr("serve.batching.scheduler.batching_refusal", lambda model: None)
    monkeypatch.setattr(
        "serve.batching.scheduler.PACKED_PREFILL", False
    )  # the padded prefill, then the join
    monkeypatch.setattr(
        "serve.batching.scheduler.MEMORY_SHARE", 0
    )  # no reused beginning: the model's own cache
    monkeypatch.setenv(
        "TUNEDESK_ANSWER_IDLE_S", "60"
    )  # the first step's one-time costs: seconds on a busy machine
    engines = Engines(warm(ModelSession(str(family_dir), dtype="float32")), "pytorch")
    with serving(api_app(engines)) as url:
        for bound in (60, BOUND_S):
            start = time.perf_counter()
            reply = chat(
                url, timeout=90, messages=[{"role": "user", "content": "hi"}]
            )  # inside the window
            assert reply.status_code == 500, reply.text  # the refusal itself, not a timeout
            assert time.perf_counter() - start < bound
            error = reply.json()["error"]
            assert error["type"] == "server_error"
            assert (
                "continuous batching needs full-attention dynamic cache layers" in error["message"]
            )
            assert "DynamicSlidingWindowLayer" in error["message"]


def test_a_failed_join_fails_only_the_newcomer_and_its_neighbour_completes(
    session, home, monkeypatch
):
    """A running answer and a newcomer whose join fails: the newcomer gets its error, the
    running one its whole answer, equal to its answer alone."""
    from serve.batching import batch_cache

    joins, real = [], batch_cache.check_cache

    def second_refused(cache):
        joins.append(cache)
        if len(joins) == 2:
            raise ValueError(
                "continuous batching needs full-attention dynamic cache layers (injected)"
            )
        real(cache)

    monkeypatch.setattr(batch_cache, "check_cache", second_refused)
    want = compare(session, MSGS, [None], GenerationSettings(max_new_tokens=60))[0].text
    engines = Engines(session, "pytorch")
    with serving(api_app(engines)) as url:
        chat(url, max_tokens=1, timeout=90)  # this join is the first; one-time costs paid
        joins.clear()
        lines, first_chunk = [], threading.Event()

        def stream():
            body = {
                "model": "base",
                "messages": MSGS,
                "max_tokens": 60,
                "temperature": 0,
                "stream": True,
            }
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as reply:
                for line in reply.iter_lines():
                    lines.append(line)
                    if '"content": "' in line and '"content": ""' not in line:
                        first_chunk.set()

        neighbour = threading.Thread(target=stream)
        neighbour.start()
        assert first_chunk.wait(60)
        refused = chat(url, timeout=30)
        neighbour.join(60)
    assert refused.status_code == 500 and "(injected)" in refused.json()["error"]["message"]
    import json

    chunks = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert not any("error" in c for c in chunks)
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        == want
    )
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length") and len(joins) >= 2


def test_a_request_the_engine_loses_times_out_within_the_bound(session, home, monkeypatch):
    """The engine drops a request without a word (as the refused cache did before issue 47):
    its client gets a 504 in OpenAI's shape within the idle bound, and the next request is
    answered."""
    from serve.batching.scheduler import Scheduler

    real = Scheduler._admit_group
    monkeypatch.setattr(Scheduler, "_admit_group", lambda self, group: None)  # lost, never finished
    engines = Engines(session, "pytorch")
    with serving(api_app(engines)) as url:
        monkeypatch.setattr(Scheduler, "_admit_group", real)
        assert chat(url, max_tokens=2, timeout=90).status_code == 200  # one-time costs paid
        monkeypatch.setattr(Scheduler, "_admit_group", lambda self, group: None)
        start = time.perf_counter()
        lost = chat(url, timeout=60)
        waited = time.perf_counter() - start
        monkeypatch.setattr(Scheduler, "_admit_group", real)
        after = chat(url, max_tokens=4)
    assert lost.status_code == 504, lost.text
    error = lost.json()["error"]
    assert error["type"] == "timeout" and error["code"] == "answer_timeout"
    assert "TUNEDESK_ANSWER_IDLE_S" in error["message"]
    assert BOUND_S - 0.5 < waited < BOUND_S + 5
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"]
