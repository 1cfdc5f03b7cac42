"""Linear layers through oneDNN's prepacked matmul: the plain model's logits, rows independent
of the batch, merged adapter weights packed too, and left alone wherever it does not apply."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from inference.generate import GenerationSettings, compare
from inference.packed_linears import pack_linears, packed_count
from inference.session import ModelSession
from tests.serve.batching.test_scheduler import save_adapters

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this PyTorch has no oneDNN"
)
PACKS = "_tunedesk_packs"


def linears(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def test_packed_model_gives_the_plain_logits_and_each_row_what_it_gets_alone(varied_dir):
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.float32).eval()
    ids = torch.randint(5, 200, (16, 9))
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
        said = pack_linears(model)
        packed = model(input_ids=ids).logits
    layers = linears(model)
    assert (
        said == f"oneDNN prepacked float32 matmuls: output layer and {len(layers) - 1} projections"
    )
    assert packed_count(model) == len(layers) and all("forward" in vars(m) for m in layers)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        for layer in (
            layers[0],
            model.get_output_embeddings(),
        ):  # rows alone == rows in a batch of 16
            hidden = torch.randn(16, layer.in_features)
            batch = layer(hidden)
            for i in (0, 7, 15):
                assert torch.equal(layer(hidden[i : i + 1])[0], batch[i])
    assert pack_linears(model) == "linear layers left as is"  # once only


def test_only_the_output_layer_when_the_copies_would_not_fit(varied_dir):
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.float32)
    said = pack_linears(model, free_bytes=1000)
    assert said.startswith(
        "oneDNN prepacked float32 matmuls: output layer; projections not packed: "
    )
    assert "25% of the memory free" in said and packed_count(model) == 1


def test_other_dtypes_and_the_environment_keep_the_plain_layers(varied_dir, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.bfloat16)
    assert "torch.bfloat16 on cpu" in pack_linears(model) and packed_count(model) == 0
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.float32)
    monkeypatch.setenv("TUNEDESK_PACKED_LINEARS", "off")
    assert pack_linears(model) == "linear layers left as is: TUNEDESK_PACKED_LINEARS=off"
    monkeypatch.setenv("TUNEDESK_PACKED_LINEARS", "sometimes")
    assert "'sometimes' is not one of all, head, off" in pack_linears(model)
    monkeypatch.setenv("TUNEDESK_PACKED_LINEARS", "head")
    assert pack_linears(model).endswith(
        "output layer; projections not packed: TUNEDESK_PACKED_LINEARS=head"
    )
    assert packed_count(model) == 1


def test_merged_adapter_weights_run_packed_and_answers_match_the_plain_session(
    home, varied_dir, monkeypatch
):
    save_adapters(home / "adapters", varied_dir, ["a", "b"])
    messages = [{"role": "user", "content": "Where is my order?"}]
    settings = GenerationSettings(max_new_tokens=16)
    packed = ModelSession(str(varied_dir), dtype="float32")
    packed.load()
    assert packed.status()["linears"].startswith(
        "oneDNN prepacked float32 matmuls: output layer and "
    )
    answers = {a: compare(packed, messages, [a], settings)[0].text for a in (None, "a", "b")}
    both = [x.text for x in compare(packed, messages, ["a", "b"], settings)]  # row-masked LoRA
    layer = next(m for m in packed.model.modules() if hasattr(m, "lora_A")).get_base_layer()
    assert len(getattr(layer, PACKS)) == 3  # the base weights, and the merged sets of a and b
    packed.merged.drop(packed._adapters["a"].peft_name)
    assert len(getattr(layer, PACKS)) == 2  # a forgotten set frees its packed copy
    monkeypatch.setenv("TUNEDESK_PACKED_LINEARS", "off")
    plain = ModelSession(str(varied_dir), dtype="float32")
    assert plain.status()["linears"] == ""
    assert {a: compare(plain, messages, [a], settings)[0].text for a in (None, "a", "b")} == answers
    assert [x.text for x in compare(plain, messages, ["a", "b"], settings)] == both
    assert packed_count(plain.model) == 0 and len(set(answers.values())) == 3
