"""Text deltas and stop strings (decoding.TextStream) on a real byte-level tokenizer."""

from __future__ import annotations

import pytest

from serve.batching.decoding import TextStream


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def _stream(tokenizer, text, stops):
    stream, deltas, hit = TextStream(tokenizer, stops), [], False
    for token in tokenizer.encode(text, add_special_tokens=False):
        delta, hit = stream.push(token)
        deltas.append(delta)
        if hit:
            break
    if not hit:
        deltas.append(stream.finish())
    return deltas, hit


def test_deltas_add_up_to_the_text_and_never_show_a_stop_string(tokenizer):
    text = "You can track your order. Your invoice is in your account."
    deltas, hit = _stream(tokenizer, text, [])
    assert "".join(deltas) == text and not hit and len([d for d in deltas if d]) > 3
    deltas, hit = _stream(tokenizer, text, ["invoice", "nothing"])
    assert hit and "".join(deltas) == "You can track your order. Your "
    assert all("inv" not in d for d in deltas)


def test_multibyte_characters_arrive_whole(tokenizer):
    deltas, _ = _stream(tokenizer, "café ünïcode ✓", [])
    assert "".join(deltas) == "café ünïcode ✓" and not any("\ufffd" in d for d in deltas)
