"""Continuous batching: every answer in a shared batch equals the answer its adapter gives
alone, whatever joins or leaves around it; one slow test on the real default model."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from core import models
from inference.generate import GenerationSettings, compare
from inference.session import ModelSession
from serve.batching.scheduler import Scheduler, ServerBusy

PROMPTS = [
    [{"role": "user", "content": "Where is my order?"}],
    [{"role": "user", "content": "hi i need to talk to a human agent please, it is urgent"}],
    [{"role": "user", "content": "refund"}],
    [{"role": "user", "content": "Can I change my shipping address before it ships? I moved."}],
]
GREEDY = GenerationSettings(max_new_tokens=24)


def save_adapters(shelf, base_dir, names, targets=("q_proj", "v_proj", "o_proj")):
    """Seeded random LoRA adapters with manifests on ``shelf``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    weight_hash = models.resolve(str(base_dir)).weight_hash
    for seed, name in enumerate(names, start=1):
        torch.manual_seed(seed)
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=list(targets), init_lora_weights=False
        )
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), config)
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.3)
        model.save_pretrained(shelf / name)
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "base_model": {"name": str(base_dir), "weight_hash": weight_hash},
        }
        (shelf / name / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def session(home, varied_dir):
    save_adapters(home / "adapters", varied_dir, ["a", "b", "c"])
    return ModelSession(str(varied_dir), dtype="float32")


@pytest.fixture
def scheduler(session):
    with Scheduler(session, max_batch=8) as sched:
        yield sched


def alone(session, messages, adapter, settings=GREEDY):
    return compare(session, messages, [adapter], settings)[0]


def test_one_request_equals_the_generate_answer(session, scheduler):
    for adapter in [None, "a"]:
        ticket = scheduler.submit(PROMPTS[0], adapter, GREEDY)
        pieces = list(ticket)
        expected = alone(session, PROMPTS[0], adapter)
        assert "".join(pieces) == expected.text and len(pieces) >= 2
        assert ticket.completion_tokens == expected.tokens
        assert ticket.finish_reason == expected.finish_reason
        assert ticket.adapter == ("base" if adapter is None else adapter)
        assert ticket.position == 0 and ticket.prompt_tokens > 5


def test_mixed_adapters_and_prompt_lengths_equal_their_solo_answers(session, scheduler):
    jobs = [(p, a) for p in PROMPTS for a in [None, "a", "b", "c"]][:8]
    tickets = [scheduler.submit(p, a, GREEDY) for p, a in jobs]
    texts = [t.text() for t in tickets]
    expected = [alone(session, p, a).text for p, a in jobs]
    assert texts == expected and len(set(expected)) > 4


def test_requests_joining_at_different_steps_equal_their_solo_answers(session, scheduler):
    long = GenerationSettings(max_new_tokens=40, min_new_tokens=40)
    first = scheduler.submit(PROMPTS[3], "a", long)
    pieces = iter(first)
    seen = [next(pieces) for _ in range(5)]  # the first answer is decoding now
    later = []
    for i, adapter in enumerate(["b", None, "c"]):
        later.append((PROMPTS[i], adapter, scheduler.submit(PROMPTS[i], adapter, GREEDY)))
        seen.append(next(pieces))  # one or more steps pass before the next joins
    assert "".join(seen + list(pieces)) == alone(session, PROMPTS[3], "a", long).text
    for prompt, adapter, ticket in later:
        assert ticket.text() == alone(session, prompt, adapter).text


def test_a_held_scheduler_starts_its_batch_once_the_other_engine_has_drained(session, scheduler):
    busy = threading.Event()
    busy.set()  # llama-server still has answers in flight
    scheduler.hold = busy.is_set
    tickets = [scheduler.submit(PROMPTS[0], a, GREEDY) for a in (None, "a")]
    assert not tickets[0].wait(0.5)
    assert [t.completion_tokens for t in tickets] == [0, 0] and scheduler.status()["waiting"] == 2
    busy.clear()
    assert [t.text() for t in tickets] == [
        w.text for w in compare(session, PROMPTS[0], [None, "a"], GREEDY)
    ]


def test_sampling_is_reproducible_per_request(session, scheduler):
    hot = GenerationSettings(max_new_tokens=16, temperature=1.5, top_k=20, top_p=0.9, seed=7)
    solo = scheduler.submit(PROMPTS[0], "a", hot).text()
    jobs = [(PROMPTS[1], "b"), (PROMPTS[0], "a"), (PROMPTS[0], None), (PROMPTS[2], "c")]
    crowd = [scheduler.submit(p, a, hot) for p, a in jobs]
    assert crowd[1].text() == solo
    assert crowd[2].text() == alone(session, PROMPTS[0], None, hot).text  # generate's sampler too
    other = GenerationSettings(max_new_tokens=16, temperature=1.5, top_k=20, top_p=0.9, seed=8)
    assert scheduler.submit(PROMPTS[0], "a", other).text() != solo


def test_cancel_mid_answer_leaves_the_others_intact(session, scheduler):
    long = GenerationSettings(max_new_tokens=60, min_new_tokens=60)
    doomed = scheduler.submit(PROMPTS[0], "a", long)
    others = [scheduler.submit(PROMPTS[1], a, GREEDY) for a in [None, "b"]]
    reader = iter(doomed)
    next(reader)
    doomed.cancel()
    assert doomed.wait(30) and doomed.finish_reason == "cancelled"
    assert doomed.completion_tokens < 60
    assert [t.text() for t in others] == [alone(session, PROMPTS[1], a).text for a in [None, "b"]]
    # a reader that walks away cancels too
    stream = iter(scheduler.submit(PROMPTS[2], "c", long))
    next(stream)
    stream.close()
    assert (
        scheduler.submit(PROMPTS[2], None, GREEDY).text() == alone(session, PROMPTS[2], None).text
    )


def test_an_error_in_one_request_does_not_stop_the_others(session, scheduler, monkeypatch):
    from serve.batching import decoding

    good = [scheduler.submit(PROMPTS[0], a, GREEDY) for a in ["a", None]]
    original = decoding.TokenChooser.choose

    def broken(self, logits, argmax):
        if self.settings.seed == 99:
            raise RuntimeError("sampler broke")
        return original(self, logits, argmax)

    monkeypatch.setattr(decoding.TokenChooser, "choose", broken)
    bad = scheduler.submit(PROMPTS[1], "b", GenerationSettings(max_new_tokens=24, seed=99))
    with pytest.raises(RuntimeError, match="sampler broke"):
        bad.text()
    assert [t.text() for t in good] == [alone(session, PROMPTS[0], a).text for a in ["a", None]]
    with pytest.raises(ValueError, match="nope"):
        scheduler.submit(PROMPTS[0], "nope", GREEDY)
    with pytest.raises(ValueError, match="max_new_tokens"):
        scheduler.submit(PROMPTS[0], None, GenerationSettings(max_new_tokens=0))


def test_stop_strings_end_the_answer_before_them(session, scheduler):
    full = alone(session, PROMPTS[0], "a").text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    ticket = scheduler.submit(PROMPTS[0], "a", GREEDY, stop=[stop])
    assert ticket.text() == full[: full.index(stop)] and ticket.finish_reason == "stop"


def test_full_batch_queues_with_positions_and_a_full_queue_is_busy(session):
    long = GenerationSettings(max_new_tokens=30, min_new_tokens=30)
    with Scheduler(session, max_batch=2, max_queue=2) as sched:
        running = [sched.submit(PROMPTS[0], a, long) for a in [None, "a"]]
        readers = [iter(t) for t in running]  # kept: a dropped reader cancels its request
        for reader in readers:
            next(reader)  # both are decoding: the batch is full
        waiting = [sched.submit(PROMPTS[1], a, GREEDY) for a in ["b", None]]
        assert [t.position for t in waiting] == [1, 2]
        with pytest.raises(ServerBusy, match="server busy"):
            sched.submit(PROMPTS[2], None, GREEDY)
        assert sched.status()["running"] == 2
        assert [t.text() for t in waiting] == [
            alone(session, PROMPTS[1], a).text for a in ["b", None]
        ]
        assert all(t.position == 0 and t.finish_reason == "length" for t in running)


def test_peft_adapter_names_fallback_gives_the_same_answers(session, scheduler, monkeypatch):
    from serve.batching import step_routes as routing

    monkeypatch.setattr(routing, "can_mask", lambda *a: False)
    monkeypatch.setattr(routing, "can_merge", lambda *a: False)
    jobs = [(PROMPTS[0], "a"), (PROMPTS[1], None), (PROMPTS[2], "b")]
    tickets = [scheduler.submit(p, a, GREEDY) for p, a in jobs]
    assert [t.text() for t in tickets] == [alone(session, p, a).text for p, a in jobs]
    lora_b = [m for n, m in session.model.named_modules() if ".lora_B." in n]
    assert not any(m._forward_pre_hooks for m in session.model.modules())
    assert lora_b


def test_many_threads_submitting_at_once(session, scheduler):
    jobs = [(PROMPTS[i % 4], [None, "a", "b", "c"][i % 4]) for i in range(12)]
    results, errors = [None] * len(jobs), []

    def client(i):
        try:
            results[i] = "".join(scheduler.submit(*jobs[i], GREEDY))
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert results == [alone(session, p, a).text for p, a in jobs]


@pytest.mark.slow
def test_real_model_sixteen_requests_over_three_adapters_equal_their_solo_answers(
    default_model_dir, home
):
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    save_adapters(home / "adapters", default_model_dir.path, ["x", "y", "z"], targets)
    session = ModelSession(str(default_model_dir.path), dtype="float32")
    questions = [
        "Where is my order?",
        "I want a refund for my jacket.",
        "How do I change my shipping address?",
        "Can I talk to a human agent?",
    ]
    jobs = [
        ([{"role": "user", "content": questions[i % 4]}], [None, "x", "y", "z"][(i // 4 + i) % 4])
        for i in range(16)
    ]
    # 16 tokens: a batch's padding, positions, cache and per-row adapters show from the first token,
    # and the 16 answers alone (one after another) are most of the test's time
    settings = GenerationSettings(max_new_tokens=16)
    with Scheduler(session) as sched:
        tickets = [sched.submit(m, a, settings) for m, a in jobs]
        texts = [t.text() for t in tickets]
        solo = [sched.submit(m, a, settings).text() for m, a in jobs]
    assert texts == solo and len(set(texts)) >= 8
    # and the scheduler alone agrees with generate (one request per adapter)
    assert [texts[i] for i in range(4)] == [
        alone(session, m, a, settings).text for m, a in jobs[:4]
    ]


def test_idle_decode_thread_ends_and_a_new_request_starts_it_again(session, monkeypatch):
    from serve.batching import scheduler as scheduler_mod

    monkeypatch.setattr(scheduler_mod, "IDLE_SECONDS", 0.2)
    with Scheduler(session) as sched:
        first = sched.submit(PROMPTS[0], None, GREEDY).text()
        thread = sched._thread
        thread.join(timeout=10)
        assert not thread.is_alive() and sched._thread is None  # the session is let go
        assert sched.submit(PROMPTS[0], None, GREEDY).text() == first
