"""`python -m bench model-costs`' own pieces: which models --models picks, the settings its rows
train with, and the padded vocabulary that keeps a converted model's real embedding size."""

from __future__ import annotations

import json

import pytest

from bench import model_costs
from bench.model_costs_serving import pad_vocabulary


def test_models_flag_takes_catalog_names_and_refuses_others():
    assert [m.hub_id for m in model_costs.selected("default, Qwen3 0.6B")] == [
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Qwen/Qwen3-0.6B",
    ]
    assert len(model_costs.selected("all")) == len(model_costs.model_catalog.CATALOG)
    with pytest.raises(ValueError, match="not in the catalog: org/nope; choose from"):
        model_costs.selected("Qwen3 0.6B,org/nope")


def test_rows_train_with_the_train_tabs_settings():
    from finetune.config import first_run_defaults, micro_batch

    d, s = first_run_defaults(), model_costs.train_settings()
    assert (s["batch_size"], s["max_length"], s["lora_r"], s["precision"]) == (
        micro_batch(d.train),  # "auto": 8 on the CPU
        d.data.max_length,
        d.lora.r,
        d.train.precision,
    )


def test_padded_vocabulary_reaches_the_config_size_and_tokenizes_as_before(
    tiny_llama_dir, tmp_path
):
    from transformers import AutoTokenizer

    before = AutoTokenizer.from_pretrained(tiny_llama_dir)
    before.save_pretrained(tmp_path)
    text = "Where is my refund for order 12345? <|im_end|>"
    added = pad_vocabulary(tmp_path / "tokenizer.json", 1000)
    after = AutoTokenizer.from_pretrained(tmp_path)
    assert added == 1000 - len(before) and len(after) == 1000
    assert after(text)["input_ids"] == before(text)["input_ids"]
    ids = set(json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"].values())
    assert ids | set(before.added_tokens_decoder) == set(range(1000))
