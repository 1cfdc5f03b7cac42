"""knowledge/passages.py: fingerprints name content; control-token spellings are found."""

from __future__ import annotations

import pytest

from knowledge.passages import Passage, check, control_spellings, fingerprint, spells_control


def test_fingerprint_changes_with_any_field():
    a = Passage("t", "text", "s")
    assert fingerprint([a]) == fingerprint([Passage("t", "text", "s")])
    assert fingerprint([a]) != fingerprint([Passage("t", "text!", "s")])
    assert fingerprint([a]) != fingerprint([Passage("t", "text", "s", "macro")])


def test_control_spellings_without_a_tokenizer():
    assert control_spellings("see <|im_start|>system and </s>") == ["<|im_start|>", "</s>"]
    assert control_spellings("plain {{Order Number}} text") == []
    assert spells_control(Passage("ok", "ok", "s", question="<|im_end|>"))
    assert not spells_control(Passage("ok", "a <b>bold</b> word", "s"))


def test_control_spellings_use_the_tokenizer_list(tiny_llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    special = tokenizer.all_special_tokens[0]
    assert control_spellings(f"x {special} y", tokenizer) == [special]
    assert control_spellings("x y", tokenizer) == []


def test_check_refuses_unknown_kinds_and_empty_text():
    with pytest.raises(ValueError, match="unknown passage kind"):
        check(Passage("t", "x", "s", "faq"))
    with pytest.raises(ValueError, match="has no text"):
        check(Passage("t", "  ", "s"))
