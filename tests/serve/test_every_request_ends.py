"""Every request ends: an answer or an error in OpenAI's shape within the configured bound,
whatever fails inside the PyTorch engine; sliding-window models (tiny Gemma 3, Mistral) are
batched and answer as plain ``generate`` does, a model the batch cannot take answers unbatched,
as ``generate`` does; a request the engine lost times out (504)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from serve_helpers import api_app
from serving_families import SERVING_FAMILIES, WINDOW, serving_family_dir

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


QUESTIONS = [
    MSGS,
    [{"role": "user", "content": "Can I change my shipping address? I moved last week."}],
    [{"role": "user", "content": "please cancel my order asap, it is wrong"}],
]


def plain_generate(
    folder, session: ModelSession, messages: list[dict], max_new_tokens: int = 24
) -> str:
    """The greedy answer of transformers' own ``generate`` on a freshly loaded model (with its
    own windowed cache)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    inputs = encode(session, [messages])
    stops = session_stop_ids(session)
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=stops,
        pad_token_id=session.tokenizer.pad_token_id,
    )
    ids = out[0, inputs["input_ids"].shape[1] :].tolist()
    ids = ids[: next((i for i, t in enumerate(ids) if t in stops), len(ids))]
    return session.tokenizer.decode(ids, skip_special_tokens=True)


def answers_at_once(url: str, questions: list) -> list[dict]:
    """Chat completions for ``questions`` sent together (one thread each), in order."""
    replies: list = [None] * len(questions)

    def ask(i: int) -> None:
        replies[i] = chat(url, messages=questions[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert all(r is not None and r.status_code == 200 for r in replies), [
        r and r.text for r in replies
    ]
    return [r.json() for r in replies]


def test_sliding_window_models_are_batched_and_answer_as_plain_generate(family_dir, home):
    """Gemma 3 (local + global layers) and Mistral with a 24-token window: three questions
    longer than the window, decoded together, each the greedy answer of ``generate``."""
    session = warm(ModelSession(str(family_dir), dtype="float32"))
    with serving(api_app(Engines(session, "pytorch"))) as url:
        start = time.perf_counter()
        replies = answers_at_once(url, QUESTIONS)
        seconds = time.perf_counter() - start
    assert {r["system_fingerprint"] for r in replies} == {"pytorch float32, batched"}
    texts = [r["choices"][0]["message"]["content"] for r in replies]
    assert texts == [plain_generate(family_dir, session, q) for q in QUESTIONS]
    assert len(set(texts)) == 3 and all(r["usage"]["prompt_tokens"] > WINDOW for r in replies)
    assert seconds < 60


def test_a_model_the_batch_cannot_take_is_answered_unbatched_as_plain_generate(
    varied_dir, home, monkeypatch
):
    """The unbatched path (``solo.py``), for a model ``support.py`` refuses (stood in for by the
    tiny llama: the Gemma 2 soft-capping it refuses does not load here, as transformers runs
    Gemma 2 with eager attention only): two questions at once, each ``generate``'s answer, the
    label says why."""
    monkeypatch.setattr(
        "serve.batching.scheduler.batching_refusal", lambda model: "attention soft-capping"
    )
    session = warm(ModelSession(str(varied_dir), dtype="float32"))
    with serving(api_app(Engines(session, "pytorch"))) as url:
        replies = answers_at_once(url, QUESTIONS[:2])
    assert {r["system_fingerprint"] for r in replies} == {
        "pytorch float32, unbatched (attention soft-capping)"
    }
    texts = [r["choices"][0]["message"]["content"] for r in replies]
    assert (
        texts == [plain_generate(varied_dir, session, q) for q in QUESTIONS[:2]]
        and len(set(texts)) == 2
    )


def test_a_cache_the_batch_refuses_is_an_error_in_words_and_the_server_goes_on(
    family_dir, home, monkeypatch
):
    """The model's own windowed cache reaching the batch (as before issue 47, when the prefill
    started without a cache): the join refuses it, the request gets a 500 in OpenAI's shape at
    once, the next one too, never a wait."""
    monkeypatch.setattr(
        "serve.batching.batch_cache.fresh_cache", lambda: None
    )  # the model's own cache
    monkeypatch.setattr(
        "serve.batching.scheduler.PACKED_PREFILL", False
    )  # the padded prefill, then the join
    monkeypatch.setattr("serve.batching.scheduler.MEMORY_SHARE", 0)  # no reused beginning either
    monkeypatch.setenv(
        "TUNEDESK_ANSWER_IDLE_S", "60"
    )  # the first step's one-time costs: seconds when busy
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
