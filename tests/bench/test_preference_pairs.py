"""bench/preference_pairs.py: rejected answers from another intent, or the base model's own
greedy answers generated for real on a tiny model, cached and reused."""

from __future__ import annotations

import csv
import json

from bench.preference_pairs import base_answers, bitext_pairs, with_base_rejected
from inference.session import ModelSession

ROWS = [
    {
        "instruction": f"where is my order {i}?" if i % 2 else f"please cancel order {i}",
        "intent": "track_order" if i % 2 else "cancel_order",
        "response": f"Your order {i} is on its way." if i % 2 else f"Order {i} is cancelled.",
    }
    for i in range(6)
]


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["instruction", "intent", "response"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_other_intent_pairs_take_the_rows_asked_for(tmp_path):
    data = write_csv(tmp_path / "rows.csv", ROWS)
    pairs = bitext_pairs(data, 2, 3)
    assert [p["prompt"][0]["content"] for p in pairs] == [r["instruction"] for r in ROWS[2:5]]
    assert [p["prompt"][0]["content"] for p in bitext_pairs(data, -2, 2)] == [
        r["instruction"] for r in ROWS[4:]
    ]
    by_answer = {r["response"]: r["intent"] for r in ROWS}
    assert all(by_answer[p["rejected"]] != p["intent"] for p in pairs)


def test_training_pairs_take_their_rejected_answers_from_the_training_rows_only(tmp_path):
    # 40 rows; pairs from rows 10-19 with rejected answers from the first 20 rows: never one of
    # the last 20 (held out), which a draw from anywhere would give ~half the time.
    rows = [{**ROWS[i % 6], "response": f"{ROWS[i % 6]['response']} ({i})"} for i in range(40)]
    data = write_csv(tmp_path / "rows.csv", rows)
    held_out = {r["response"] for r in rows[20:]}
    rejected = [
        p["rejected"]
        for seed in range(5)
        for p in bitext_pairs(data, 10, 10, seed=seed, rejected_rows=slice(0, 20))
    ]
    assert len(rejected) == 50 and not held_out & set(rejected)
    own = {
        r["response"] for r in rows[10:20]
    }  # or from the pairs' own rows: each is another pair's chosen
    assert {p["rejected"] for p in bitext_pairs(data, 10, 10, rejected_rows=slice(10, 20))} <= own
    anywhere = [p["rejected"] for seed in range(5) for p in bitext_pairs(data, 10, 10, seed=seed)]
    assert held_out & set(anywhere)


def test_base_rejected_pairs_are_generated_cached_and_reused(tmp_path, varied_dir):
    data = write_csv(tmp_path / "rows.csv", ROWS)
    instructions = [r["instruction"] for r in ROWS]
    cache = tmp_path / "base-answers.jsonl"
    # Already cached: an empty answer, one equal to its row's reference, and one of another length.
    cache.write_text(
        "".join(
            json.dumps(e) + "\n"
            for e in [
                {"instruction": instructions[0], "tokens": 8, "answer": " "},
                {"instruction": instructions[1], "tokens": 8, "answer": ROWS[1]["response"]},
                {"instruction": instructions[2], "tokens": 16, "answer": "from a longer run"},
            ]
        )
    )
    base = base_answers(
        ModelSession(str(varied_dir), dtype="float32"),
        instructions,
        cache,
        max_new_tokens=8,
        batch_size=3,
    )
    assert base.generated == 4 and base.seconds > 0
    assert base.answers[instructions[2]] != "from a longer run"
    pairs, skipped = with_base_rejected(bitext_pairs(data, 0, 6), base.answers)
    assert skipped == 2 and [p["prompt"][0]["content"] for p in pairs] == instructions[2:]
    for pair, row in zip(pairs, ROWS[2:], strict=True):
        assert (
            pair["chosen"] == row["response"]
            and pair["rejected"] == base.answers[row["instruction"]]
        )
        assert pair["rejected"].strip() and pair["rejected"] != pair["chosen"]
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(lines) == 3 + 4 and {e["answer"] for e in lines[3:]} == {
        p["rejected"] for p in pairs
    }
    # A rerun generates nothing: this session names no model, so any generation would fail.
    text = cache.read_text()
    again = base_answers(
        ModelSession(str(tmp_path / "no-model")), instructions, cache, max_new_tokens=8
    )
    assert again.generated == 0 and again.seconds == 0.0 and again.answers == base.answers
    assert cache.read_text() == text
