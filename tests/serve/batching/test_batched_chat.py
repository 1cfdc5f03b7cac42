"""Chat and Compare through the shared scheduler give what the direct calls give."""

from __future__ import annotations

import json

import pytest
import torch
from run_helpers import wait_until

from core import models
from inference.generate import GenerationSettings
from inference.generate import compare as direct_compare
from inference.generate import stream_chat as direct_stream
from inference.session import ModelSession
from serve.batching.chat import compare, stream_chat
from serve.batching.scheduler import shared_scheduler

MSGS = [{"role": "user", "content": "Where is my order?"}]
GREEDY = GenerationSettings(max_new_tokens=16)


@pytest.fixture
def session(home, varied_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    weight_hash = models.resolve(str(varied_dir)).weight_hash
    for seed, name in enumerate(["a", "b"], start=1):
        torch.manual_seed(seed)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                            init_lora_weights=False)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(varied_dir), config)
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.3)
        model.save_pretrained(home / "adapters" / name)
        manifest = {"format": "tunedesk-adapter/1", "name": name,
                    "base_model": {"name": str(varied_dir), "weight_hash": weight_hash}}
        (home / "adapters" / name / "manifest.json").write_text(json.dumps(manifest))
    session = ModelSession(str(varied_dir), dtype="float32")
    yield session
    shared_scheduler(session).close()


def test_compare_panes_equal_the_direct_compare(session):
    direct = direct_compare(session, MSGS, [None, "a", "b"], GREEDY)
    batched = compare(session, MSGS, [None, "a", "b"], GREEDY)
    assert [(p.adapter, p.adapter_hash, p.text, p.tokens, p.finish_reason) for p in batched] == [
        (p.adapter, p.adapter_hash, p.text, p.tokens, p.finish_reason) for p in direct]
    assert len({p.seconds for p in batched}) == 1
    with pytest.raises(ValueError, match="at least one"):
        compare(session, MSGS, [], GREEDY)


def test_stream_grows_to_the_direct_answer_and_closing_cancels(session):
    values = list(stream_chat(session, MSGS, "a", GREEDY))
    assert all(b.startswith(a) for a, b in zip(values, values[1:], strict=False))
    assert values[-1] == list(direct_stream(session, MSGS, "a", GREEDY))[-1]
    stream = stream_chat(session, MSGS, "b", GenerationSettings(max_new_tokens=200,
                                                                     min_new_tokens=200))
    next(stream)
    stream.close()
    scheduler = shared_scheduler(session)
    wait_until(lambda: scheduler.status()["running"] == 0, "the closed stream's row to leave")
    assert list(stream_chat(session, MSGS, None, GREEDY))[-1] == direct_compare(
        session, MSGS, [None], GREEDY)[0].text
