"""The output layer through oneDNN's prepacked matmul: same logits, rows independent of the
batch, and left alone wherever it does not apply."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from adapters.packed_head import pack_output_layer
from adapters.session import ModelSession

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch has no oneDNN")


def test_packed_head_gives_the_plain_logits_and_each_row_what_it_gets_alone(varied_dir):
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.float32).eval()
    ids = torch.randint(5, 200, (16, 9))
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
        assert pack_output_layer(model) == "output layer: oneDNN prepacked float32 matmul"
        packed = model(input_ids=ids).logits
        alone = [model(input_ids=ids[i:i + 1]).logits[0] for i in (0, 7, 15)]
    assert "forward" in vars(model.get_output_embeddings())
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    head = model.get_output_embeddings()
    hidden = torch.randn(16, head.in_features)
    for i in (0, 7, 15):  # the head's rows are bit-identical alone and in a batch of 16
        assert torch.equal(head(hidden[i:i + 1])[0], head(hidden)[i])
    for i, row in zip((0, 7, 15), alone, strict=True):
        torch.testing.assert_close(row, packed[i], rtol=1e-4, atol=1e-4)
    assert pack_output_layer(model).startswith("output layer left as is: not a plain")  # once only


def test_other_dtypes_keep_the_plain_layer(varied_dir):
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.bfloat16)
    assert "bfloat16 on cpu" in pack_output_layer(model)
    assert "forward" not in vars(model.get_output_embeddings())


def test_the_session_says_how_its_output_layer_runs(home, varied_dir):
    session = ModelSession(str(varied_dir), dtype="float32")
    session.load()
    assert session.status()["output_layer"] == "output layer: oneDNN prepacked float32 matmul"
    assert ModelSession(str(varied_dir), dtype="bfloat16").status()["output_layer"] == ""


def test_the_environment_can_keep_the_plain_layer(varied_dir, monkeypatch):
    monkeypatch.setenv("TUNEDESK_OUTPUT_LAYER", "plain")
    model = AutoModelForCausalLM.from_pretrained(varied_dir, dtype=torch.float32)
    assert pack_output_layer(model) == "output layer left as is: TUNEDESK_OUTPUT_LAYER=plain"
    assert "forward" not in vars(model.get_output_embeddings())
