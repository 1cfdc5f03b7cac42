"""Prompts prefilled without padding (serve/batching/packed_prefill.py): the same caches and
logits as the padded prefill, bit for bit, with reused beginnings and mixed adapters."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from serve.batching.packed_prefill import can_pack, packed_prefill
from serve.batching.prefill import prefill_prompts
from serve.batching.prefix_cache import PrefixCache
from serve.batching.step_routes import StepRouter

SHARED = list(range(3, 23))  # 20 tokens: past MIN_REUSE, so later prompts reuse them


def _rows(session, specs):
    """Rows for (adapter, extra tokens) pairs; prompts = SHARED + their own tokens."""
    rows = []
    for adapter, extra in specs:
        loaded = session.ensure_adapter(adapter, keep={"a", "b", "c"}) if adapter else None
        rows.append(
            SimpleNamespace(
                prompt=SHARED + extra,
                peft=loaded.peft_name if loaded else None,
                version=(adapter, loaded.adapter_hash) if loaded else None,
            )
        )
    return rows


def _prefill(session, router, rows, packed: bool, warm: list):
    prefix = PrefixCache(2**28)
    pad = session.tokenizer.pad_token_id or 0
    prefill_prompts(router.forward, prefix, warm, pad)  # stores SHARED for each adapter version
    pack = functools.partial(packed_prefill, session.model, router.forward) if packed else None
    return prefill_prompts(router.forward, prefix, rows, pad, pack), prefix


@pytest.mark.parametrize("adapters", [[None, None, None], ["a", "a", "b", None]])
def test_packed_prefill_equals_the_padded_one(session, adapters):
    session.load()
    assert can_pack(session.model)
    router = StepRouter(session)
    extras = [[40, 41, 42], [50], [60, 61, 62, 63, 64, 65], [70, 71]]
    specs = sorted(zip(adapters, extras, strict=False), key=lambda s: s[0] or "")
    with session.lock:
        warm = _rows(session, [(a, [90]) for a in dict.fromkeys(adapters)])
        rows = _rows(session, specs)
        assert router.packs([r.peft for r in rows])
        (padded_cache, padded_mask, padded_logits), padded_prefix = _prefill(
            session, router, rows, False, warm
        )
        warm = _rows(session, [(a, [90]) for a in dict.fromkeys(adapters)])
        (cache, mask, logits), prefix = _prefill(session, router, rows, True, warm)
    assert torch.equal(mask, padded_mask) and mask.shape[0] == len(rows)
    assert int(mask.sum()) == sum(len(r.prompt) for r in rows)
    # oneDNN's projections are row-invariant: the base is bit-identical; LoRA's small matmuls
    # (MKL) see other row counts packed, which may move the last bits on some CPUs
    same = (
        torch.equal
        if not any(adapters)
        else functools.partial(torch.testing.assert_close, rtol=1e-5, atol=1e-5)
    )
    assert same(logits, padded_logits) is not False
    real = mask.bool()
    for mine, theirs in zip(cache.layers, padded_cache.layers, strict=True):
        assert same(mine.keys.transpose(1, 2)[real], theirs.keys.transpose(1, 2)[real]) is not False
        assert (
            same(mine.values.transpose(1, 2)[real], theirs.values.transpose(1, 2)[real])
            is not False
        )
    assert prefix.status()["hits"] == padded_prefix.status()["hits"] == len(rows)


def test_rows_of_one_adapter_apart_are_not_packed(session):
    session.load()
    router = StepRouter(session)
    with session.lock:
        rows = _rows(session, [("a", [1]), ("b", [2]), ("a", [3, 4])])
        assert not router.packs([r.peft for r in rows])
        assert router.packs([r.peft for r in sorted(rows, key=lambda r: r.peft)])


def test_only_llama_attention_is_packed(tiny_gpt2_dir):
    from transformers import AutoModelForCausalLM

    assert not can_pack(AutoModelForCausalLM.from_pretrained(tiny_gpt2_dir))


def test_the_scheduler_packs_prompts_of_different_lengths_and_answers_as_alone(
    session, monkeypatch
):
    import serve.batching.scheduler as module
    from inference.generate import GenerationSettings
    from tests.serve.batching.test_scheduler import PROMPTS, alone

    calls = []
    real = module.packed_prefill
    monkeypatch.setattr(module, "packed_prefill", lambda *a, **k: calls.append(1) or real(*a, **k))
    settings = GenerationSettings(max_new_tokens=12)
    jobs = [(PROMPTS[0], "a"), (PROMPTS[2], None), (PROMPTS[1], "b"), (PROMPTS[3], "a")]
    with module.Scheduler(session) as scheduler:
        with session.lock:  # all four wait, then go in one prefill
            tickets = [scheduler.submit(p, a, settings) for p, a in jobs]
        texts = [t.text() for t in tickets]
    assert calls, "prompts of different lengths were prefilled padded"
    assert texts == [alone(session, p, a, settings).text for p, a in jobs]
