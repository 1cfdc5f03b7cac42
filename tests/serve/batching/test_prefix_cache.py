"""Reused prompt beginnings: the store's rules, and answers through the scheduler that equal
the answers computed from scratch, for shared system prompts and the next turn of a chat."""

from __future__ import annotations

import pytest
import torch

from inference.generate import GenerationSettings
from inference.session import ModelSession
from serve.batching.prefix_cache import MIN_REUSE, PrefixCache
from serve.batching.scheduler import Scheduler
from tests.serve.batching.test_scheduler import alone, save_adapters

SYSTEM = (
    "You are the support assistant of a shop. Answer in one or two sentences, be kind, "
    "and never ask for a card number. Orders ship in two days; refunds take a week."
)
GREEDY = GenerationSettings(max_new_tokens=20)


def kv(tokens: int, fill: float = 1.0, layers: int = 2):
    keys = torch.full((layers, 2, tokens, 4), fill)
    return keys, -keys


def test_lookup_takes_the_longest_stored_beginning_of_the_same_adapter_version():
    cache = PrefixCache(max_bytes=10**6)
    first = list(range(40))
    cache.store(None, first, *kv(40, 1.0))
    cache.store(("a", "h1"), first, *kv(40, 2.0))
    hit = cache.lookup(None, first[:30] + [99, 98])
    assert (
        hit.tokens == 30 and hit.keys.shape == (2, 2, 30, 4) and float(hit.keys[0, 0, 0, 0]) == 1.0
    )
    assert cache.lookup(("a", "h1"), first).tokens == 39  # one prompt token is always prefilled
    assert cache.lookup(("a", "h2"), first) is None  # a retrained adapter shares nothing
    assert cache.lookup(None, first[: MIN_REUSE - 1] + [99] * 30) is None  # too short to reuse
    assert cache.status() == {
        "entries": 2,
        "bytes": cache.bytes,
        "hits": 2,
        "lookups": 4,
        "reused_tokens": 69,
    }


def test_store_replaces_what_it_extends_and_forgets_the_least_recently_used():
    one_entry = sum(t.nbytes for t in kv(40)) + 40 * 8
    cache = PrefixCache(max_bytes=2 * one_entry + 100)
    cache.store(None, list(range(30)), *kv(30))
    cache.store(None, list(range(40)), *kv(40))  # the same conversation, one turn later
    assert cache.status()["entries"] == 1
    cache.store(None, [7] * 40, *kv(40))
    cache.lookup(None, list(range(40)))  # used again: now the most recent
    cache.store(None, [8] * 40, *kv(40))  # over the budget: [7] * 40 goes
    assert cache.status()["entries"] == 2 and cache.bytes <= cache.max_bytes
    assert cache.lookup(None, [7] * 40) is None and cache.lookup(None, [8] * 41).tokens == 40
    assert PrefixCache(max_bytes=0).store(None, list(range(40)), *kv(40)) is None


@pytest.fixture
def session(home, varied_dir):
    save_adapters(home / "adapters", varied_dir, ["a", "b"])
    return ModelSession(str(varied_dir), dtype="float32")


def chat(*turns: str) -> list[dict]:
    roles = ["user", "assistant"]
    return [
        {"role": "system", "content": SYSTEM},
        *({"role": roles[i % 2], "content": text} for i, text in enumerate(turns)),
    ]


def tokens(session, messages, **kwargs) -> int:
    return len(
        session.tokenizer.apply_chat_template(messages, return_dict=True, **kwargs)["input_ids"]
    )


def test_shared_system_prompts_and_next_turns_reuse_keys_and_answer_as_from_scratch(session):
    question = chat("Where is my order?")
    asked = tokens(session, question, add_generation_prompt=True)
    with Scheduler(session, max_batch=8) as scheduler:
        first = scheduler.submit(question, None, GREEDY).text()
        assert scheduler.prefix.status()["hits"] == 0
        jobs = [
            (chat("I want a refund for my order."), None),
            (chat("Where is my invoice?"), "a"),
            (chat("please cancel my order asap"), "b"),
        ]
        texts = [t.text() for t in [scheduler.submit(m, a, GREEDY) for m, a in jobs]]
        shared = scheduler.prefix.status()  # the base's second prompt: the system prompt reused
        jobs.append((chat("Where is my order?", first, "Can I change my shipping address?"), None))
        texts.append(scheduler.submit(jobs[-1][0], None, GREEDY).text())
        turn = scheduler.prefix.status()  # the next turn: the first conversation reused
    assert first == alone(session, question, None, GREEDY).text
    assert texts == [alone(session, m, a, GREEDY).text for m, a in jobs]
    assert len(set(texts)) == 4
    system = tokens(session, chat())
    assert (
        shared["hits"] == 1 and system <= shared["reused_tokens"] < asked
    )  # a and b: nothing of theirs
    assert turn["hits"] == 2 and turn["reused_tokens"] - shared["reused_tokens"] > asked


def test_prefix_reuse_can_be_turned_off(session):
    with Scheduler(session, prefix_bytes=0) as scheduler:
        for _ in range(2):
            scheduler.submit(chat("Where is my order?"), None, GREEDY).text()
        assert scheduler.prefix.status() == {
            "entries": 0,
            "bytes": 0,
            "hits": 0,
            "lookups": 2,
            "reused_tokens": 0,
        }


def test_the_turns_benchmark_reuses_each_earlier_turn_and_answers_alike(session):
    from bench.turns import TURNS, render, run_chat

    runs = []
    for prefix_bytes in (0, None):
        with Scheduler(session, prefix_bytes=prefix_bytes) as scheduler:
            # the tiny model reads 256 tokens of a near byte-level vocabulary: short turns
            runs.append(run_chat(scheduler, [t[:30] for t in TURNS[:2]], 4, system="Be kind."))
    off, on = runs
    assert [r["answer"] for r in off] == [r["answer"] for r in on] and all(r["answer"] for r in on)
    assert [r["reused"] for r in off] == [0, 0]
    assert on[0]["reused"] == 0 and on[1]["reused"] > on[0]["prompt"]
    table = render(off, on, ["--turns", "2"])
    assert "| 2 | " in table and "Answers identical with and without reuse: 2/2 turns." in table
