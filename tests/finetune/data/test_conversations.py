"""finetune.conversations: every assistant turn labelled, last-turn-only, ShareGPT/OpenAI shapes,
oldest turns dropped to fit, bad conversations skipped and counted."""

from __future__ import annotations

import json

import pytest

from core.templates import encode_chat
from finetune import data
from finetune.config import DataArgs
from finetune.data.conversations import BadConversation, encode, parse_messages, trained_turns
from finetune.data.format import IGNORE_INDEX, ChatFormat

QUESTIONS = [
    "How do I track my order?",
    "It says {{Order Number}} is unknown.",
    "Can I change my shipping address?",
    "What payment methods do you accept?",
    "please cancel my order asap",
    "Where is my invoice? é ü 😀",
]
ANSWERS = [
    "You can track your order with the tracking link in your email.",
    "I am sorry to hear that; I can help you get a refund.",
    "Yes, you can change the shipping address before it ships.",
    "We accept credit cards, PayPal and bank transfer.",
    "I have cancelled your order and you will get an email.",
    "Your invoice is in your account under Orders.",
]


def conversation(turns: int, system: str | None = None) -> list[dict]:
    msgs = [{"role": "system", "content": system}] if system else []
    for q, a in zip(QUESTIONS[:turns], ANSWERS[:turns], strict=True):
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return msgs


def label_runs(labels: list[int]) -> list[list[int]]:
    """Contiguous labelled spans, in order."""
    runs, current = [], []
    for t in labels:
        if t != IGNORE_INDEX:
            current.append(t)
        elif current:
            runs, current = runs + [current], []
    return runs + [current] if current else runs


@pytest.fixture(scope="module")
def llama_tok(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


@pytest.fixture(scope="module")
def gpt2_tok(tiny_gpt2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_gpt2_dir)


def prepare_file(tmp_path, rows, name="chats.jsonl", **kw):
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False))
    return DataArgs(path=str(path), val_fraction=0.0, **kw)


@pytest.mark.parametrize("turns", [1, 2, 3, 4, 5, 6])
def test_labels_are_exactly_the_assistant_turns(tmp_path, llama_tok, turns):
    args = prepare_file(tmp_path, [{"messages": conversation(turns)}] * 2, max_length=512)
    prepared = data.prepare(args, llama_tok)
    row = prepared.train[0]
    eot = "<|im_end|>"
    runs = [llama_tok.decode(r) for r in label_runs(row["labels"])]
    assert runs == [a + eot for a in ANSWERS[:turns]]
    # Nothing else is labelled, and each label is the input token at its position.
    labelled = [(i, t) for i, t in enumerate(row["labels"]) if t != IGNORE_INDEX]
    assert all(row["input_ids"][i] == t for i, t in labelled)
    assert prepared.stats["assistant_turns_trained"] == 2 * turns
    assert prepared.stats["conversations"] == (2 if turns > 1 else 0)


@pytest.mark.parametrize("turns", [1, 3, 6])
def test_each_turn_follows_the_prompt_chat_renders(llama_tok, turns):
    """Training sees, before every answer, the exact tokens chat will prompt with."""
    for tok in (llama_tok,):
        fmt = ChatFormat(tok)
        msgs = conversation(turns, system="Be brief.")
        enc = encode(fmt, msgs, 1024, "truncate_response", False)
        starts = [
            i
            for i, t in enumerate(enc.labels)
            if t != IGNORE_INDEX and (i == 0 or enc.labels[i - 1] == IGNORE_INDEX)
        ]
        answers = [k for k, m in enumerate(msgs) if m["role"] == "assistant"]
        assert len(starts) == turns
        for start, k in zip(starts, answers, strict=True):
            assert enc.input_ids[:start] == encode_chat(tok, msgs[:k])


def test_without_a_template_conversations_train_their_last_turn(tmp_path, gpt2_tok):
    """The fallback format closes earlier answers with no token: only the last is labelled."""
    assert encode(ChatFormat(gpt2_tok), conversation(3), 1024, "truncate_response", False) is None
    prepared = data.prepare(prepare_file(tmp_path, [{"messages": conversation(3)}] * 2), gpt2_tok)
    runs = [gpt2_tok.decode(r) for r in label_runs(prepared.train[0]["labels"])]
    assert runs == [ANSWERS[2] + gpt2_tok.eos_token]


def test_last_turn_only_keeps_the_tokens_and_labels_the_final_answer(tmp_path, llama_tok):
    rows = [{"messages": conversation(4)}] * 2
    every = data.prepare(prepare_file(tmp_path, rows), llama_tok)
    last = data.prepare(prepare_file(tmp_path, rows, last_turn_only=True), llama_tok)
    assert last.train[0]["input_ids"] == every.train[0]["input_ids"]
    runs = [llama_tok.decode(r) for r in label_runs(last.train[0]["labels"])]
    assert runs == [ANSWERS[3] + "<|im_end|>"]
    assert last.fingerprint != every.fingerprint
    assert last.stats["assistant_turns_trained"] == 2


def test_sharegpt_and_openai_shapes(tmp_path, llama_tok):
    share = [
        {
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": QUESTIONS[0]},
                {"from": "gpt", "value": ANSWERS[0]},
                {"from": "human", "value": QUESTIONS[1]},
                {"from": "gpt", "value": ANSWERS[1]},
            ]
        }
    ] * 2
    openai = [
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": QUESTIONS[0]}]},
                {"role": "assistant", "content": ANSWERS[0]},
                {"role": "user", "content": QUESTIONS[1]},
                {"role": "assistant", "content": ANSWERS[1]},
            ]
        }
    ] * 2
    for rows in (share, openai):
        prepared = data.prepare(prepare_file(tmp_path, rows), llama_tok)
        runs = [llama_tok.decode(r) for r in label_runs(prepared.train[0]["labels"])]
        assert runs == [ANSWERS[0] + "<|im_end|>", ANSWERS[1] + "<|im_end|>"]
    text = llama_tok.decode(prepared.train[0]["input_ids"])
    assert QUESTIONS[0] in text


def test_overlong_conversations_lose_their_oldest_turns(tmp_path, llama_tok):
    fmt = ChatFormat(llama_tok)
    msgs = conversation(6, system="Be brief.")
    whole = encode(fmt, msgs, 4096, "truncate_response", False)
    limit = len(whole.input_ids) - 20  # one exchange too many
    enc = encode(fmt, msgs, limit, "truncate_response", False)
    assert enc.status == "oldest_turns_dropped" and enc.turns_dropped >= 1
    assert len(enc.input_ids) <= limit
    kept = 6 - enc.turns_dropped
    runs = [llama_tok.decode(r) for r in label_runs(enc.labels)]
    assert runs == [a + "<|im_end|>" for a in ANSWERS[6 - kept :]]
    text = llama_tok.decode(enc.input_ids)
    assert text.startswith("<|im_start|>system\nBe brief.") and QUESTIONS[0] not in text
    # The fewest exchanges were cut: one more would also have fitted.
    one_less = encode(
        fmt, msgs[:1] + msgs[1 + 2 * (enc.turns_dropped - 1) :], limit, "truncate_response", False
    )
    assert enc.turns_dropped == 1 or one_less.status == "oldest_turns_dropped"
    # Counted in the dataset stats.
    prepared = data.prepare(
        prepare_file(tmp_path, [{"messages": msgs}] * 3, max_length=limit), llama_tok
    )
    assert prepared.stats["conversations_shortened"] == 3


def test_a_last_exchange_too_long_alone_follows_the_truncation_policy(llama_tok):
    fmt = ChatFormat(llama_tok)
    msgs = conversation(2)
    msgs[-1]["content"] = "word " * 200
    cut = encode(fmt, msgs, 64, "truncate_response", False)
    assert cut.status == "truncated" and len(cut.input_ids) == 64
    assert cut.labels[-1] == fmt.end_of_turn_id
    assert encode(fmt, msgs, 64, "drop", False).status == "too_long"


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([{"role": "user", "content": "hello?"}], "no_assistant_turn"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"},
            ],
            "roles_out_of_order",
        ),
        (
            [
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"},
            ],
            "roles_out_of_order",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x" * 10_000_001}],
            "too_large",
        ),
        ([{"role": "tool", "content": "a"}], "bad_messages"),
        ("not a list", "bad_messages"),
    ],
)
def test_bad_conversations_get_a_reason_and_a_sentence(messages, reason):
    with pytest.raises(BadConversation) as err:
        parse_messages(messages)
    assert err.value.reason == reason
    assert err.value.detail.endswith(("turn to learn from", ")", "M", "messages", "dict"))


def test_bad_conversations_are_skipped_and_counted(tmp_path, llama_tok):
    good = {"messages": conversation(2)}
    bad = [
        {"messages": [{"role": "user", "content": "anyone there?"}]},
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "big"},
                {"role": "assistant", "content": "x" * 10_000_000},
            ]
        },  # 10 MB
    ]
    # A JSON array (the JSONL reader refuses any line over 8 MB before parsing, with a sentence).
    prepared = data.prepare(prepare_file(tmp_path, [good, *bad, good], name="c.json"), llama_tok)
    s = prepared.stats
    assert s["rows_train"] == 2 and s["rows_skipped"] == 3
    assert s["skip_reasons"] == {"no_assistant_turn": 1, "roles_out_of_order": 1, "too_large": 1}
    assert any("10.0 M characters" in e for e in s["skipped_examples"])
    with pytest.raises(ValueError, match="8 MB"):
        data.prepare(prepare_file(tmp_path, [good, bad[2]], name="c.jsonl"), llama_tok)


def test_trailing_user_turn_is_dropped(llama_tok):
    msgs = conversation(2) + [{"role": "user", "content": "thanks!"}]
    assert parse_messages(msgs) == conversation(2)
    assert trained_turns([IGNORE_INDEX, 5, 6, IGNORE_INDEX, 7]) == 2
