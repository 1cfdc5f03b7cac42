"""Each family's chat template and stop tokens, on tiny models with the family's own markers
(tests/family_models.py): the answer ends at the family's end-of-turn token, training labels
the answer and that token only, and Qwen3's thinking block stays out of answers and labels."""

from __future__ import annotations

import pytest
from family_models import FAMILIES, SPECS

from core.templates import encode_chat, end_of_turn_ids
from core.thinking import ThinkingFilter, visible_answer
from finetune.data.format import ChatFormat

ROW = {"prompt": ["Where is my order?"], "response": ["It ships today."], "history": [""]}


@pytest.fixture(scope="module")
def tokenizers(family_dir):
    from transformers import AutoTokenizer

    return lambda family: AutoTokenizer.from_pretrained(family_dir(family))


@pytest.mark.parametrize("family", FAMILIES)
def test_training_labels_the_answer_and_the_familys_end_of_turn(family, tokenizers):
    tok = tokenizers(family)
    end = tok.convert_tokens_to_ids(SPECS[family].end_of_turn)
    assert end in end_of_turn_ids(tok)  # generation stops there, whatever the eos is
    fmt = ChatFormat(tok)
    assert fmt.end_of_turn_id == end
    enc = fmt.encode_batch(ROW, max_length=64, truncation="right")
    ids, labels = enc["input_ids"][0], enc["labels"][0]
    answer = [t for t, label in zip(ids, labels, strict=True) if label != -100]
    assert answer[-1] == end and tok.decode(answer[:-1]).strip() == "It ships today."
    prompt = encode_chat(tok, [{"role": "user", "content": "Where is my order?"}])
    assert ids[: len(prompt)] == prompt  # training continues exactly where chat's prompt ends


def test_qwen3_prompts_carry_the_empty_thinking_block_and_training_never_labels_it(tokenizers):
    """Qwen3's template writes "<think>\\n\\n</think>\\n\\n" before a finished conversation's
    last answer; asked for no thinking it writes it into the prompt too. Then the block is
    prompt, never a label, and the answer starts where the model was trained to start it."""
    tok = tokenizers("qwen3")
    prompt = tok.decode(encode_chat(tok, [{"role": "user", "content": "Hi"}]))
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    enc = ChatFormat(tok).encode_batch(ROW, max_length=64, truncation="right")
    labelled = [
        t for t, label in zip(enc["input_ids"][0], enc["labels"][0], strict=True) if label != -100
    ]
    think = {tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>")}
    assert think <= set(enc["input_ids"][0]) and not think & set(labelled)
    # what the model writes anyway is not shown: its real tokenizer keeps the tags as text
    assert (
        tok.decode(
            tok.encode("<think>\nhm\n</think>\n\nHello", add_special_tokens=False),
            skip_special_tokens=True,
        )
        == "<think>\nhm\n</think>\n\nHello"
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<think>\nwhere is it\n</think>\n\nIt ships today.", "It ships today."),
        ("\n<think></think>Hello", "Hello"),
        ("<think>still thinking", ""),
        ("Hello <think> is a tag", "Hello <think> is a tag"),  # only a block that opens the answer
        ("<thin", "<thin"),
    ],
)
def test_a_reasoning_block_that_opens_an_answer_is_not_shown(text, shown):
    assert visible_answer(text) == shown


def test_streamed_answers_show_the_same_text_in_any_pieces():
    text = "<think>\nwhere is it\n</think>\n\nIt ships today."
    for size in (1, 3, 7, len(text)):
        shown = ThinkingFilter()
        pieces = [shown.feed(text[i : i + size]) for i in range(0, len(text), size)]
        assert "".join(pieces) + shown.finish() == "It ships today."
        assert not any("<" in p for p in pieces)
    shown = ThinkingFilter()  # a start that may still become "<think>" waits, then shows
    assert shown.feed("<th") == "" and shown.feed("e end") == "<the end" and shown.finish() == ""


def test_the_batching_engines_text_stream_hides_qwen3s_reasoning_block(tokenizers):
    """Token by token, as PyTorch's batching engine decodes: the block never shows, and a
    stop string inside it does not end the answer."""
    from serve.batching.decoding import TextStream

    tok = tokenizers("qwen3")
    ids = tok.encode(
        "<think>\nthe user says STOP\n</think>\n\nIt ships today.", add_special_tokens=False
    )
    stream = TextStream(tok, stops=["STOP"])
    deltas = [stream.push(t) for t in ids]
    assert not any(hit for _, hit in deltas)
    assert "".join(d for d, _ in deltas) + stream.finish() == "It ships today."
