"""finetune.data.collate: packed batches keep examples apart, padded batches mask padding,
length grouping cuts padding, token counts add up."""

from __future__ import annotations

import random

import pytest
import torch

from finetune.data.collate import (
    IGNORE_INDEX,
    Collator,
    batch_token_counts,
    length_grouped_batches,
    pack,
    pad,
    prepare_model_for_packing,
    supports_packing,
)


def examples(vocab: int, lengths=(7, 12, 4), seed: int = 0) -> list[dict]:
    """Random examples whose first 3 tokens are a 'prompt' (labels -100)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * 3 + ids[3:], "length": n})
    return out


def load(folder, attn: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation=attn, dtype=torch.float32
    )
    return model.eval()


@pytest.mark.parametrize(
    "arch, attn", [("llama", "eager"), ("llama", "sdpa"), ("gpt2", "eager"), ("gpt2", "sdpa")]
)
def test_packed_logits_equal_separate_logits(arch, attn, tiny_llama_dir, tiny_gpt2_dir):
    model = load(tiny_llama_dir if arch == "llama" else tiny_gpt2_dir, attn)
    prepare_model_for_packing(model)
    exs = examples(model.config.vocab_size)
    with torch.no_grad():
        packed = model(**pack(exs)).logits[0]  # (T, V)
        alone = torch.cat([model(input_ids=torch.tensor([e["input_ids"]])).logits[0] for e in exs])
    assert packed.shape == alone.shape
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=0)


def test_with_kv_cache_on_packed_examples_leak_into_each_other(tiny_llama_dir):
    # Why prepare_model_for_packing exists: use_cache=True (the config default) builds a cache,
    # and transformers then skips packed-sequence detection.
    model = load(tiny_llama_dir, "sdpa")
    assert model.config.use_cache
    exs = examples(model.config.vocab_size)
    with torch.no_grad():
        packed = model(**pack(exs)).logits[0]
        alone = torch.cat([model(input_ids=torch.tensor([e["input_ids"]])).logits[0] for e in exs])
    first = len(exs[0]["input_ids"])
    torch.testing.assert_close(packed[:first], alone[:first], atol=1e-5, rtol=0)
    assert (packed[first:] - alone[first:]).abs().max() > 1e-3


def test_packed_loss_equals_token_weighted_separate_losses(tiny_llama_dir):
    model = load(tiny_llama_dir, "sdpa")
    prepare_model_for_packing(model)
    exs = examples(model.config.vocab_size, lengths=(9, 5, 14, 6))
    batch = pack(exs)
    # The first label of every example is ignored: nothing learns to predict the next example.
    starts = torch.tensor([0, 9, 14, 28])
    assert (batch["labels"][0, starts] == IGNORE_INDEX).all()
    assert batch["position_ids"][0, starts].tolist() == [0, 0, 0, 0]
    with torch.no_grad():
        packed_loss = model(**batch).loss
        total, count = 0.0, 0
        for e in exs:
            ids = torch.tensor([e["input_ids"]])
            n = sum(1 for t in e["labels"][1:] if t != IGNORE_INDEX)
            total += model(input_ids=ids, labels=torch.tensor([e["labels"]])).loss * n
            count += n
    assert batch_token_counts(batch)["label_tokens"] == count
    torch.testing.assert_close(packed_loss, total / count, atol=1e-5, rtol=0)


def test_padded_batch_masks_padding_and_matches_separate_logits(tiny_llama_dir):
    model = load(tiny_llama_dir, "sdpa")
    exs = examples(model.config.vocab_size)
    batch = pad(exs, pad_token_id=0, pad_to_multiple_of=8)
    assert batch["input_ids"].shape == (3, 16)
    assert batch["attention_mask"].sum(1).tolist() == [7, 12, 4]
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        for i, e in enumerate(exs):
            alone = model(input_ids=torch.tensor([e["input_ids"]])).logits[0]
            torch.testing.assert_close(logits[i, : len(e["input_ids"])], alone, atol=1e-5, rtol=0)
    assert batch_token_counts(batch) == {"tokens": 23, "label_tokens": 14, "padding": 25}


def test_collator_picks_the_shape_and_a_pad_id(tiny_gpt2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt2_dir)
    exs = examples(50)
    assert set(Collator.for_tokenizer(tok)(exs)) == {"input_ids", "labels", "position_ids"}
    padded = Collator.for_tokenizer(tok, packing=False)(exs)
    assert padded["input_ids"][2, -1].item() == tok.pad_token_id
    with pytest.raises(ValueError, match="the same non-zero number"):
        pack([{"input_ids": [1, 2], "labels": [1]}])


def test_packing_refuses_an_attention_that_cannot_split_sequences():
    class Config:
        _attn_implementation = "paged|custom"
        use_cache = True

    class Model:
        config = Config()

    with pytest.raises(ValueError, match="turn packing off"):
        prepare_model_for_packing(Model())


def test_length_grouped_batches_cover_every_index_and_cut_padding():
    rng = random.Random(0)
    lengths = [rng.randint(5, 500) for _ in range(1000)]
    batches = length_grouped_batches(lengths, batch_size=8, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert batches == length_grouped_batches(lengths, batch_size=8, seed=3)
    assert batches != length_grouped_batches(lengths, batch_size=8, seed=4)
    assert max(lengths[i] for i in batches[0]) == max(lengths)

    def padding(bs):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in bs)

    order = list(range(1000))
    rng.shuffle(order)
    plain = [order[i : i + 8] for i in range(0, 1000, 8)]
    assert padding(batches) < padding(plain) / 5


def _tiny(model_type: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        ffn_dim=64,
        word_embed_proj_dim=32,
        pad_token_id=0,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def _packed_gap(model) -> float:
    model.config.use_cache = False
    exs = examples(model.config.vocab_size)
    with torch.no_grad():
        packed = model(**pack(exs)).logits[0]
        alone = torch.cat([model(input_ids=torch.tensor([e["input_ids"]])).logits[0] for e in exs])
    return float((packed - alone).abs().max())


@pytest.mark.parametrize("model_type", ["mistral", "qwen2", "gemma", "phi3"])
def test_listed_architectures_pack_cleanly(model_type):
    assert supports_packing(model_type)
    assert _packed_gap(_tiny(model_type)) < 1e-5


def test_unlisted_architecture_that_ignores_position_ids_is_not_offered_packing():
    # OPT learns absolute positions from the attention mask, not position_ids: packed rows leak.
    assert not supports_packing("opt")
    assert _packed_gap(_tiny("opt")) > 1e-3
