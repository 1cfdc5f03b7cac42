"""The llama.cpp engine over GGUFs from the export code: greedy answers equal PyTorch + PEFT,
adapters switch per request without leaking, and the API serves from it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from serve_helpers import ADAPTERS, api_app, serving

from inference.generate import GenerationSettings, compare
from serve.engines import Engines

MSGS = [{"role": "user", "content": "Where is my order? I ordered a blue jacket."}]
GREEDY = GenerationSettings(max_new_tokens=12)


def test_greedy_answers_equal_pytorch_and_peft(llama, llama_session):
    want = compare(llama_session, MSGS, [None, *ADAPTERS], GREEDY)
    assert len({w.text for w in want}) == 4  # every adapter changes the answer
    for pane in want:
        adapter = None if pane.adapter == "base" else pane.adapter
        ticket = llama.submit(MSGS, adapter, GREEDY)
        assert ticket.text() == pane.text, pane.adapter
        assert (ticket.completion_tokens, ticket.finish_reason) == (pane.tokens, pane.finish_reason)
        assert ticket.adapter == pane.adapter
        assert ticket.prompt_tokens == int(llama_session.tokenizer.apply_chat_template(
            MSGS, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"].shape[1])


def test_switching_adapters_between_requests_never_reuses_another_adapters_cache(llama):
    alone = {a: llama.submit(MSGS, a, GREEDY).text() for a in (None, "a", "b")}
    order = ["a", "a", None, "b", "a", None, None, "b"]
    assert [llama.submit(MSGS, a, GREEDY).text() for a in order] == [alone[a] for a in order]


def test_unknown_adapters_and_bad_settings_are_refused_at_submit(llama):
    with pytest.raises(ValueError, match="nope"):
        llama.submit(MSGS, "nope", GREEDY)
    with pytest.raises(ValueError, match="temperature"):
        llama.submit(MSGS, None, GenerationSettings(temperature=9))


def test_api_serves_sixteen_clients_from_llama_cpp_with_each_adapters_solo_answer(llama_session, llama):
    engines = Engines(llama_session, "llama.cpp", llama_factory=lambda session, max_queue: llama)
    solo = {m: compare(llama_session, MSGS, [None if m == "base" else m], GREEDY)[0].text for m in ["base", *ADAPTERS]}
    with serving(api_app(engines)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)

        def ask(model):
            got = client.chat.completions.create(model=model, messages=MSGS, temperature=0, max_tokens=12)
            return got.choices[0].message.content, got.system_fingerprint

        models = ["base", *ADAPTERS] * 4
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, models))
    assert [text for text, _ in answers] == [solo[m] for m in models]
    assert {engine for _, engine in answers} == {"llama.cpp f32"}


def test_auto_measures_both_engines_and_labels_the_answer(llama_session, llama):
    engines = Engines(llama_session, "auto", llama_factory=lambda session, max_queue: llama)
    engines.prepare()
    assert set(engines.rates) >= {"pytorch", "llama.cpp"} and all(r > 0 for r in engines.rates.values())
    fastest = max(("pytorch", "llama.cpp"), key=engines.rates.get)
    ticket = engines.submit(MSGS, "a", GREEDY)
    assert ticket.text() == compare(llama_session, MSGS, ["a"], GREEDY)[0].text
    assert ticket.engine.startswith(fastest) and "auto" in engines.describe()


def test_compare_decodes_each_pane_on_its_own_context_with_each_adapters_solo_answer(llama_session, llama):
    from serve.llama_compare import LlamaCompare

    panes = LlamaCompare(llama, llama_session.resolved.weight_hash)
    try:
        adapters = [None, "a", "b"]
        got = panes.compare(MSGS, adapters, GREEDY)
        assert [a.text for a in got] == [llama.submit(MSGS, a, GREEDY).text() for a in adapters]
        assert [a.adapter for a in got] == ["base", "a", "b"]
        hashes = [a.adapter_hash for a in got]
        assert hashes[0] == llama_session.resolved.weight_hash
        assert hashes[1:] == [llama_session.adapter_hash(a) for a in ("a", "b")]  # the weights' own hash
        assert len({a.seconds for a in got}) == 1 and got[0].seconds > 0
        assert len(panes.panes(3)) == 3 and all(p is not llama for p in panes.panes(3))
        assert panes.threads_per_pane(2) == max(1, llama.threads // 2)
        again = panes.compare(MSGS, ["b", None], GREEDY)  # panes reused, adapters swapped over
        assert [a.text for a in again] == [got[2].text, got[0].text]
        with pytest.raises(ValueError, match="nope"):
            panes.compare(MSGS, [None, "nope"], GREEDY)
        with pytest.raises(ValueError, match="1 to 3"):
            panes.compare(MSGS, [None, "a", "b", "c"], GREEDY)
    finally:
        panes.close()


def test_engines_compare_names_how_the_panes_were_decoded(llama_session, llama):
    on_llama = Engines(llama_session, "llama.cpp", llama_factory=lambda session, max_queue: llama)
    on_torch = Engines(llama_session, "pytorch")
    want = compare(llama_session, MSGS, [None, "a"], GREEDY)
    for engines, how in ((on_llama, "side by side on llama.cpp f32 (one context per pane"),
                         (on_torch, "together in one batch on pytorch float32")):
        answers, line = engines.compare(MSGS, [None, "a"], GREEDY)
        assert [a.text for a in answers] == [w.text for w in want]
        assert line.startswith(f"2 answers decoded {how}"), line
