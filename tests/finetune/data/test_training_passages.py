"""finetune/data/passages.py: training rows shown their best past answers, never their own."""

from __future__ import annotations

import json

import pytest

from finetune import data
from finetune.config import DataArgs
from finetune.data.labels import IGNORE_INDEX

PLANTED = "ZEBRA-PLANT-7781: open Settings, then Shipping, then Edit next to the order."
TOPICS = ("shipping address", "refund status", "password reset", "invoice copy")


@pytest.fixture
def rows_file(tmp_path):
    """60 rows over four topics, each answer its own; one answer planted, and a near-duplicate
    question (row 1) that should be shown it."""
    rows = [
        {
            "instruction": f"how do I change the {TOPICS[i % 4]} for order {i}",
            "intent": TOPICS[i % 4].replace(" ", "_"),
            "response": PLANTED if i == 0 else f"Answer {i} about the {TOPICS[i % 4]}: step {i}.",
        }
        for i in range(60)
    ]
    rows[0]["instruction"] = "how do I change the shipping address of my zebra parcel"
    rows[1]["instruction"] = "change the shipping address on the zebra parcel please"
    rows[1]["intent"] = "shipping_address"  # what it asks about (a grounded search routes by it)
    path = tmp_path / "support.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tok(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def _prepare(tok, path, **kw):
    args = DataArgs(path=str(path), with_passages=2, val_fraction=0.2, max_length=128, **kw)
    return args, data.prepare(args, tok)


def _prompt_and_answer(tok, example) -> tuple[str, str, list[int]]:
    labels = example["labels"]
    start = next(i for i, t in enumerate(labels) if t != IGNORE_INDEX)
    ids = example["input_ids"]
    answer = tok.decode([t for t in labels if t != IGNORE_INDEX])
    return tok.decode(ids[:start]), answer, ids[:start]


def _rows(prepared, split):
    raw, tok_rows = prepared.rows_raw[split], getattr(prepared, split)
    return list(zip(raw, tok_rows, strict=True))


def test_a_row_never_sees_its_own_answer_but_its_neighbours_do(tok, rows_file):
    _, prepared = _prepare(tok, rows_file)
    train = _rows(prepared, "train")
    planted = [(raw, ex) for raw, ex in train if raw["response"] == PLANTED]
    if not planted:  # the seeded split put the planted row in validation: no one may see it
        assert not any(PLANTED in _prompt_and_answer(tok, ex)[0] for _, ex in train)
        pytest.fail("the planted row should land in the training split with seed 42")
    neighbour = next(ex for raw, ex in train if "on the zebra parcel" in raw["prompt"])
    assert PLANTED in _prompt_and_answer(tok, neighbour)[0]
    prompt, answer, _ = _prompt_and_answer(tok, planted[0][1])
    assert PLANTED not in prompt and answer.startswith(PLANTED)
    for raw, ex in train + _rows(prepared, "val"):
        assert f"The team answered: {raw['response']}" not in _prompt_and_answer(tok, ex)[0]
    assert prepared.stats["passages"]["rows_by_passages_shown"] == {"2": 60}


def test_validation_rows_are_never_passages(tok, rows_file):
    _, prepared = _prepare(tok, rows_file)
    val_answers = set(prepared.rows_raw["val"]["response"])
    assert val_answers
    shown_anything = 0
    for _, ex in _rows(prepared, "train") + _rows(prepared, "val"):
        prompt = _prompt_and_answer(tok, ex)[0]
        shown_anything += "The team answered:" in prompt
        assert not any(answer in prompt for answer in val_answers)
    assert shown_anything == 60


def test_labels_cover_the_answer_only(tok, rows_file):
    _, prepared = _prepare(tok, rows_file)
    for raw, ex in _rows(prepared, "train"):
        prompt, answer, _ = _prompt_and_answer(tok, ex)
        assert answer == raw["response"] + "<|im_end|>"
        assert "The team answered:" in prompt and raw["prompt"] in prompt
        assert all(t == IGNORE_INDEX for t in ex["labels"][: len(_prompt_and_answer(tok, ex)[2])])


def test_the_prompt_is_what_serving_grounding_builds(tok, rows_file, home):
    """The same passages through knowledge.grounding.ground on the shelf training writes."""
    from core.templates import encode_chats
    from finetune.train.past_answers import shelve_train_split
    from knowledge.grounding import ground
    from knowledge.store import KnowledgeShelf

    args, prepared = _prepare(tok, rows_file, system_prompt="You are Acme support.")
    entry = shelve_train_split(prepared, str(rows_file))
    assert entry["fingerprint"] == prepared.stats["passages"]["knowledge_fingerprint"]
    shelf = KnowledgeShelf()
    for raw, ex in _rows(prepared, "train")[:10] + _rows(prepared, "val"):
        messages = [
            {"role": "system", "content": "You are Acme support."},
            {"role": "user", "content": raw["prompt"]},
        ]
        grounded, grounding = ground(
            messages,
            entry["name"],
            entry["version"],
            k=2,
            shelf=shelf,
            context_tokens=10_000,
            exclude=lambda p, own=raw["response"]: p.text == own,
        )
        assert len(grounding.shown) == 2
        expected = encode_chats(tok, [grounded], add_generation_prompt=True)[0]
        assert _prompt_and_answer(tok, ex)[2] == expected


def test_rows_too_long_lose_passages_never_the_answer(tok, tmp_path, monkeypatch):
    import knowledge.grounding

    rows = [
        {
            "instruction": f"where is my parcel number {i}",
            "response": f"Parcel {i}: " + " ".join(f"word{j}" for j in range(40)),
        }
        for i in range(30)
    ]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Grounding's character estimate lets every passage through: the token check must cut them.
    monkeypatch.setattr(knowledge.grounding, "CHARS_PER_TOKEN", 1000.0)
    monkeypatch.setattr("finetune.data.passages.PASSAGE_TOKENS", 60)
    _, prepared = _prepare(tok, path, truncation="truncate_response")
    shown = prepared.stats["passages"]["rows_by_passages_shown"]
    assert prepared.stats["passages"]["token_limit"] == 128 + 2 * 60
    assert set(shown) - {"2"} and sum(shown.values()) == 30, shown
    assert prepared.stats["truncated"] == 0
    for raw, ex in _rows(prepared, "train") + _rows(prepared, "val"):
        assert _prompt_and_answer(tok, ex)[1] == raw["response"] + "<|im_end|>"
        assert len(ex["input_ids"]) <= 128 + 2 * 60


def test_passages_change_the_fingerprint_and_zero_changes_nothing(tok, rows_file):
    plain = data.prepare(DataArgs(path=str(rows_file), val_fraction=0.2, max_length=128), tok)
    _, grounded = _prepare(tok, rows_file)
    assert grounded.fingerprint != plain.fingerprint and "passages" not in plain.stats
    assert plain.train["input_ids"] != grounded.train["input_ids"]
    assert plain.rows_raw["train"]["response"] == grounded.rows_raw["train"]["response"]


def _shown(tok, example) -> bool:
    return "The team answered:" in _prompt_and_answer(tok, example)[0]


def test_a_passage_share_shows_passages_to_that_share_of_training_rows_only(tok, rows_file):
    """passage_share 0.5: about half the training rows are shown passages, the rest are encoded
    exactly as a run without passages encodes them; every validation row is shown them."""
    plain = data.prepare(DataArgs(path=str(rows_file), val_fraction=0.2, max_length=128), tok)
    whole = _prepare(tok, rows_file)[1]
    _, half = _prepare(tok, rows_file, passage_share=0.5)
    assert half.fingerprint not in (whole.fingerprint, plain.fingerprint)
    shown = half.stats["passages"]["rows_by_passages_shown"]
    assert half.stats["passages"]["passage_share"] == 0.5
    train = _rows(half, "train")
    with_passages = [ex for _, ex in train if _shown(tok, ex)]
    assert 0.3 * len(train) < len(with_passages) < 0.7 * len(train)
    assert shown == {"0": len(train) - len(with_passages), "2": len(with_passages) + 12}
    plain_ids = dict(zip(plain.rows_raw["train"]["prompt"], plain.train["input_ids"], strict=True))
    for raw, ex in train:
        if not _shown(tok, ex):
            assert ex["input_ids"] == plain_ids[raw["prompt"]]
    assert all(_shown(tok, ex) for _, ex in _rows(half, "val"))
    again = _prepare(tok, rows_file, passage_share=0.5)[1]
    assert again.train["input_ids"] == half.train["input_ids"]  # the same rows every run


def test_a_passage_share_outside_zero_to_one_is_refused():
    from finetune.config import RunConfig, validate

    cfg = RunConfig()
    cfg.data.with_passages, cfg.data.passage_share = 1, 1.5
    assert any("share of training rows shown passages" in p for p in validate(cfg))


def _write(tmp_path, name, answer_of) -> str:
    rows = [
        {
            "instruction": f"please help with the {TOPICS[i % 4]} of my order {i}",
            "intent": TOPICS[i % 4].replace(" ", "_"),
            "response": answer_of(i),
        }
        for i in range(48)
    ]
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_auto_trains_with_a_passage_where_answers_are_canned_and_without_where_not(tok, tmp_path):
    """with_passages "auto": a team answering each topic with one macro (a word changed) gets a
    passage per row; one whose every answer is its own gets none, tokens as a plain run's."""
    import random

    canned = _write(
        tmp_path,
        "canned.jsonl",
        lambda i: f"Go to Settings, open {TOPICS[i % 4]}, press Edit and save it (ticket {i}).",
    )
    words = [f"w{n}" for n in range(3000)]
    fresh = _write(
        tmp_path,
        "fresh.jsonl",
        lambda i: " ".join(random.Random(i).sample(words, 14)) + f" about {TOPICS[i % 4]}.",
    )
    args = DataArgs(path=canned, with_passages="auto", passage_share=1.0, max_length=128)
    chosen = data.prepare(args, tok).stats["passages"]
    assert chosen["auto"]["passages"] == 1 and chosen["auto"]["overlap"] >= 0.65
    assert chosen["auto"]["line"].startswith("passages auto: train with 1 passage per row")
    assert chosen["rows_by_passages_shown"].get("1", 0) > 0

    args = DataArgs(path=fresh, with_passages="auto", max_length=128)
    prepared = data.prepare(args, tok)
    chosen = prepared.stats["passages"]
    assert chosen["auto"]["passages"] == 0 and chosen["auto"]["overlap"] < 0.3
    assert "rows_by_passages_shown" not in chosen and chosen["token_limit"] == 128
    plain = data.prepare(DataArgs(path=fresh, max_length=128), tok)
    assert prepared.train["input_ids"] == plain.train["input_ids"]
    assert prepared.fingerprint != plain.fingerprint  # "auto" is its own setting


def test_word_f1():
    from finetune.data.passages import word_f1

    assert word_f1("Open Settings, then Edit", "open settings then edit") == 1.0
    assert word_f1("a b c d", "a b x y") == 0.5 and word_f1("a", "") == 0.0
