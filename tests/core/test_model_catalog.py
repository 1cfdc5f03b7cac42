"""The recommended models: each shape builds (on the meta device: no memory) a model of the
size its model card states, and the picker's names find their entries."""

from __future__ import annotations

import pytest

from core import model_catalog
from core.model_catalog import CATALOG, config_dict, find

# What the model cards say beyond the total: the weights outside the embedding.
CARD_NON_EMBEDDING = {"Qwen/Qwen3-0.6B": 0.44e9, "google/gemma-3-270m-it": 100e6}


def _meta_model(entry):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = config_dict(entry)
    values.pop("architectures")
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("entry", CATALOG, ids=[m.hub_id for m in CATALOG])
def test_each_shape_builds_a_model_of_the_size_its_card_states(entry):
    model = _meta_model(entry)
    assert type(model).__name__ == entry.config["architectures"][0]
    total = sum(p.numel() for p in model.parameters())  # tied: the head shares the embedding
    assert abs(total / entry.params - 1) < 0.01, (entry.name, total)
    if entry.hub_id in CARD_NON_EMBEDDING:
        body = total - model.get_input_embeddings().weight.numel()
        assert abs(body / CARD_NON_EMBEDDING[entry.hub_id] - 1) < 0.01, (entry.name, body)


def test_gemma3_keeps_its_sliding_layers_and_qwen3_none():
    gemma = _meta_model(find("google/gemma-3-270m-it")).config
    assert gemma.layer_types.count("full_attention") == 3 and gemma.sliding_window == 512
    assert gemma.layer_types[5] == "full_attention" and gemma.head_dim == 256
    assert _meta_model(find("Qwen3 0.6B")).config.sliding_window is None


def test_find_takes_hub_ids_names_and_the_default_aliases():
    assert find("default").hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert find("  qwen/qwen3-0.6b ").name == "Qwen3 0.6B"
    assert find("Llama 3.2 1B Instruct").family == "llama3"
    assert find("some-org/another-model") is None and find("") is None and find(None) is None


def test_choices_label_each_model_with_its_size():
    labels = dict((hub, text) for text, hub in model_catalog.choices())
    assert labels["Qwen/Qwen3-0.6B"] == "Qwen3 0.6B (600 M parameters)"
    assert labels["meta-llama/Llama-3.2-1B-Instruct"].startswith(
        "Llama 3.2 1B Instruct (1.23 B parameters, gated"
    )
    assert len(labels) == len(CATALOG) and "granite" not in " ".join(labels).lower()


def test_config_dict_is_a_copy():
    entry = find("google/gemma-3-270m-it")
    config_dict(entry)["layer_types"].append("x")
    assert len(entry.config["layer_types"]) == 18
