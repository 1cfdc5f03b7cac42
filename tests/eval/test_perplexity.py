import math
from types import SimpleNamespace

import pytest
import torch

from eval.perplexity import nll_per_row, perplexity, response_nll

PAIRS = [
    ("How do I track my order?", "Use the tracking link in your email."),
    ("Where is my invoice?", "Your invoice is in your account under Orders."),
    ("hi", "Hello! How can I help?"),
    ("please cancel my order asap", "I have cancelled your order."),
    ("What payment methods do you accept?", "We accept credit cards, PayPal and bank transfer."),
]


class ZeroLogits(torch.nn.Module):
    """A causal LM stand-in whose every next-token distribution is uniform."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.vocab))  # (B, T, V)


def _examples(tokenizer) -> list[dict]:
    """Chat-formatted examples with the prompt masked and the end-of-turn token scored."""
    out = []
    for prompt, answer in PAIRS:
        messages = [{"role": "user", "content": prompt}]
        head = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        out.append(
            {
                "input_ids": prompt_ids + answer_ids,
                "labels": [-100] * len(prompt_ids) + answer_ids,
            }
        )
    return out


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    return model, tokenizer, _examples(tokenizer)


def test_uniform_model_has_perplexity_equal_to_vocabulary_size():
    examples = [
        {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]},
        {"input_ids": [5, 6, 7, 8, 9, 10], "labels": [-100, 6, 7, 8, 9, 10]},
    ]
    result = perplexity(ZeroLogits(37), examples, batch_size=2)
    assert result["tokens"] == 7
    assert result["perplexity"] == pytest.approx(37.0, rel=1e-6)
    assert result["nll"] == pytest.approx(math.log(37), rel=1e-6)


def test_tiny_llama_perplexity_does_not_depend_on_batch_size(tiny):
    model, tokenizer, examples = tiny
    assert len({len(ex["input_ids"]) for ex in examples}) > 1  # padding really happens
    results = [
        perplexity(model, examples, batch_size=bs, pad_token_id=tokenizer.pad_token_id)
        for bs in (1, 2, 3, 8)
    ]
    assert len({r["tokens"] for r in results}) == 1
    for r in results[1:]:
        assert r["perplexity"] == pytest.approx(results[0]["perplexity"], rel=1e-5)
    # A random 2-layer model is close to uniform over the vocabulary.
    assert 0.5 * len(tokenizer) < results[0]["perplexity"] < 2 * len(tokenizer)


def test_single_example_matches_the_models_own_loss(tiny):
    model, _, examples = tiny
    ex = examples[1]
    with torch.no_grad():
        loss = model(
            input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["labels"]])
        ).loss
    result = perplexity(model, [ex])
    assert result["tokens"] == sum(label != -100 for label in ex["labels"][1:])
    assert result["perplexity"] == pytest.approx(math.exp(loss.item()), rel=1e-5)


def test_rows_nll_is_each_rows_own_loss_in_the_input_order(tiny):
    model, tokenizer, examples = tiny
    pad = tokenizer.pad_token_id
    rows = [nll_per_row(model, examples, batch_size=bs, pad_token_id=pad) for bs in (1, 3)]
    for k, ex in enumerate(examples):  # batched, padded and sorted, yet each row's own sum
        with torch.no_grad():
            loss = model(
                input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["labels"]])
            ).loss
        scored = sum(label != -100 for label in ex["labels"][1:])
        for row in rows:
            assert row["tokens"][k] == scored
            assert row["nll"][k] == pytest.approx(loss.item() * scored, rel=1e-5)
    whole = perplexity(model, examples, batch_size=2, pad_token_id=pad)
    assert rows[1]["tokens"].sum() == whole["tokens"]
    assert rows[1]["nll"].sum() / whole["tokens"] == pytest.approx(whole["nll"], rel=1e-6)


def test_training_mode_is_restored(tiny):
    model, _, examples = tiny
    model.train()
    try:
        perplexity(model, examples[:2])
        assert model.training
    finally:
        model.eval()
    perplexity(model, examples[:2])
    assert not model.training


def test_response_nll_sums_over_given_batches():
    batch = {
        "input_ids": torch.tensor([[1, 2, 3], [4, 5, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "labels": torch.tensor([[-100, 2, 3], [-100, 5, -100]]),
    }
    total, tokens = response_nll(ZeroLogits(10), [batch, batch])
    assert tokens == 6
    assert total == pytest.approx(6 * math.log(10))


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        ([], "at least one"),
        ([{"input_ids": [1, 2]}], "needs 'input_ids' and 'labels'"),
        ([{"input_ids": [1, 2], "labels": [1]}], "line up"),
        ([{"input_ids": [1, 2], "labels": [-100, -100]}], "no scored tokens"),
    ],
)
def test_bad_examples_raise(examples, match):
    with pytest.raises(ValueError, match=match):
        perplexity(ZeroLogits(5), examples)
