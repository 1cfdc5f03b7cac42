"""Streaming chat, batched generation and compare on a ModelSession, checked against plain
transformers generation; one slow test on the real default model."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from core import models
from core.templates import FALLBACK_PROMPT, render_prompt
from inference.generate import GenerationSettings, compare, generate_batch, stream_chat
from inference.session import ModelSession

MSGS = [{"role": "user", "content": "Where is my order?"}]
GREEDY = GenerationSettings(max_new_tokens=16)


@pytest.fixture
def session(home, varied_dir):
    """A session on ``varied_dir`` with seeded random adapters a, b, c on the shelf."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    weight_hash = models.resolve(str(varied_dir)).weight_hash
    for seed, name in enumerate(["a", "b", "c"], start=1):
        torch.manual_seed(seed)
        config = LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "o_proj"],
            init_lora_weights=False,
        )
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(varied_dir), config)
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.3)
        model.save_pretrained(home / "adapters" / name)
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "base_model": {"name": str(varied_dir), "weight_hash": weight_hash},
        }
        (home / "adapters" / name / "manifest.json").write_text(json.dumps(manifest))
    return ModelSession(str(varied_dir), dtype="float32")


def test_settings_report_every_problem_at_once():
    assert GenerationSettings().validate() == []
    bad = GenerationSettings(
        max_new_tokens=4096,
        temperature=-1,
        top_p=0,
        top_k=-3,
        repetition_penalty=5,
        seed=-1,
        min_new_tokens=9999,
    )
    problems = bad.validate()
    assert len(problems) == 7
    assert any("max_new_tokens" in p and "2048" in p for p in problems)
    with pytest.raises(ValueError, match="temperature"):
        bad.check()


def test_base_pane_equals_the_plain_model_token_for_token(session, varied_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    panes = compare(session, MSGS, [None, "a", "b"], GREEDY)
    tok = AutoTokenizer.from_pretrained(varied_dir)
    plain = AutoModelForCausalLM.from_pretrained(varied_dir).eval()
    enc = tok(render_prompt(tok, MSGS), return_tensors="pt", add_special_tokens=False)
    out = plain.generate(
        **enc,
        max_new_tokens=16,
        do_sample=False,
        eos_token_id=[tok.eos_token_id],
        pad_token_id=tok.pad_token_id,
    )
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    if tok.eos_token_id in new:
        new = new[: new.index(tok.eos_token_id)]
    assert panes[0].adapter == "base" and panes[0].text == tok.decode(new, skip_special_tokens=True)
    assert panes[0].tokens == len(new) and panes[0].adapter_hash == session.resolved.weight_hash


def test_adapters_differ_and_each_pane_equals_its_answer_alone(session):
    panes = compare(session, MSGS, [None, "a", "b"], GREEDY)
    assert [p.adapter for p in panes] == ["base", "a", "b"]
    assert len({p.text for p in panes}) == 3
    assert len({p.adapter_hash for p in panes}) == 3 and all(
        len(p.adapter_hash) == 16 for p in panes
    )
    for pane in panes:
        alone = compare(session, MSGS, [None if pane.adapter == "base" else pane.adapter], GREEDY)[
            0
        ]
        assert (alone.text, alone.tokens) == (pane.text, pane.tokens)
    assert panes[0].seconds == panes[1].seconds  # one batched call


def test_compare_with_only_the_base_needs_no_adapter(session):
    answer = compare(session, MSGS, ["__base__"], GREEDY)[0]
    assert answer.adapter == "base" and answer.text and session.loaded_adapters == []
    assert not hasattr(session.model, "peft_config")  # still the plain transformers model


def test_mixed_batch_with_different_prompts_left_padded(session):
    prompts = [MSGS, [{"role": "user", "content": "hi i need to talk to a human agent please"}]]
    both = generate_batch(session, prompts, ["a", None], GREEDY)
    assert both[0].text == compare(session, prompts[0], ["a"], GREEDY)[0].text
    assert both[1].text == compare(session, prompts[1], [None], GREEDY)[0].text


def test_stream_grows_to_the_greedy_answer(session):
    values = list(stream_chat(session, MSGS, "a", GREEDY))
    assert len(values) >= 2
    assert all(
        later.startswith(earlier) for earlier, later in zip(values, values[1:], strict=False)
    )
    assert values[-1] == compare(session, MSGS, ["a"], GREEDY)[0].text


def test_system_prompt_is_prepended(session):
    settings = GenerationSettings(max_new_tokens=8, system_prompt="You are a support agent.")
    with_system = [{"role": "system", "content": "You are a support agent."}, *MSGS]
    assert (
        compare(session, MSGS, [None], settings)[0].text
        == compare(session, with_system, [None], GenerationSettings(max_new_tokens=8))[0].text
    )


def test_closing_a_stream_early_stops_generation_and_frees_the_lock(session):
    stream = stream_chat(
        session, MSGS, "b", GenerationSettings(max_new_tokens=200, min_new_tokens=200)
    )
    next(stream)
    stream.close()
    assert session.lock.acquire(timeout=5)
    session.lock.release()


def test_sampling_is_reproducible_per_seed(session):
    hot = GenerationSettings(max_new_tokens=16, temperature=1.5, top_k=0, top_p=1.0, seed=7)
    first = [p.text for p in compare(session, MSGS, [None, "a"], hot)]
    assert [p.text for p in compare(session, MSGS, [None, "a"], hot)] == first
    alone = compare(session, MSGS, ["a"], hot)[0].text
    assert list(stream_chat(session, MSGS, "a", hot))[-1] == alone
    other = GenerationSettings(max_new_tokens=16, temperature=1.5, top_k=0, top_p=1.0, seed=8)
    assert compare(session, MSGS, ["a"], other)[0].text != alone


def test_concurrent_chats_equal_their_single_threaded_answers(session):
    adapters = ["a", "b", "c", None]
    expected = {a: compare(session, MSGS, [a], GREEDY)[0].text for a in adapters}
    results, errors = {}, []

    def chat(adapter):
        try:
            for _ in range(2):
                *_, results[adapter] = stream_chat(session, MSGS, adapter, GREEDY)
        except Exception as err:  # surfaced below; a thread cannot fail the test itself
            errors.append(err)

    threads = [threading.Thread(target=chat, args=(a,)) for a in adapters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and results == expected


def test_model_without_chat_template_uses_the_fallback_prompt(home, tiny_gpt2_dir):
    session = ModelSession(str(tiny_gpt2_dir), dtype="float32")
    text = render_prompt(session.tokenizer, MSGS)
    assert text == FALLBACK_PROMPT.format(prompt="Where is my order?")
    assert text == "### Instruction:\nWhere is my order?\n\n### Response:\n"
    answer = compare(session, MSGS, [None], GenerationSettings(max_new_tokens=5))[0]
    assert answer.tokens <= 5 and answer.finish_reason in ("stop", "length")


@pytest.mark.slow
def test_real_model_streams_a_reply_that_ends(default_model_dir, home):
    session = ModelSession(str(default_model_dir.path))
    settings = GenerationSettings(max_new_tokens=96)
    values = list(
        stream_chat(session, [{"role": "user", "content": "Where is my order?"}], None, settings)
    )
    assert values and values[-1].strip()
    assert "<|im_end|>" not in values[-1] and "<|im_start|>" not in values[-1]
    answer = compare(
        session, [{"role": "user", "content": "Where is my order?"}], [None], settings
    )[0]
    assert answer.text == values[-1]  # greedy: streamed and batched agree
    assert answer.finish_reason == "stop" or answer.tokens == settings.max_new_tokens
    assert answer.tokens <= settings.max_new_tokens


def test_masked_rows_give_the_panes_peft_adapter_names_gives(session, monkeypatch):
    import inference.routing as routing_mod

    masked = compare(session, MSGS, [None, "a", "b"], GREEDY)
    monkeypatch.setattr(routing_mod, "can_mask", lambda *a: False)  # PEFT's own per-row routing
    routed = compare(session, MSGS, [None, "a", "b"], GREEDY)
    assert [(p.adapter, p.text, p.tokens) for p in masked] == [
        (p.adapter, p.text, p.tokens) for p in routed
    ]


def test_compare_leaves_no_hooks_and_the_active_adapter_as_it_was(session):
    session.activate("b")
    chat_before = compare(session, MSGS, ["b"], GREEDY)[0].text
    before = list(session.model.base_model.active_adapters)
    compare(session, MSGS, [None, "a", "b"], GREEDY)
    assert list(session.model.base_model.active_adapters) == before
    lora_b = [m for n, m in session.model.named_modules() if ".lora_B." in n]
    assert lora_b and not any(m._forward_hooks for m in lora_b)
    assert compare(session, MSGS, ["b"], GREEDY)[0].text == chat_before


def test_one_adapter_answers_from_merged_weights_and_the_base_is_untouched(session, varied_dir):
    """Chat with one adapter runs on W + s*B@A copies (inference/merged.py): the same answer as
    the unmerged LoRA layers, and the base weights are the same tensors, unchanged, after."""
    import inference.routing as routing_mod

    session.load_adapter("a")
    weights = {n: p.detach().clone() for n, p in session.model.named_parameters()}
    merged = compare(session, MSGS, ["a"], GREEDY)[0]
    assert session.merged._sets  # the merged path ran
    for name, param in session.model.named_parameters():
        assert torch.equal(param, weights[name]), name
    original = routing_mod.can_merge
    try:
        routing_mod.can_merge = lambda *a: False  # PEFT's unmerged LoRA layers
        unmerged = compare(session, MSGS, ["a"], GREEDY)[0]
    finally:
        routing_mod.can_merge = original
    assert (merged.text, merged.tokens) == (unmerged.text, unmerged.tokens)
    base = compare(session, MSGS, [None], GREEDY)[0]
    assert base.text == compare(session, MSGS, [None, "a"], GREEDY)[0].text
    session.unload_adapter("a")
    assert not session.merged._sets
