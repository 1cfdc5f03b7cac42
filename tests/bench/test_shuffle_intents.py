"""`python -m bench shuffle-intents`: every response moves to a row of another intent."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from bench.__main__ import main
from bench.shuffle_intents import moved_responses


def test_every_row_takes_an_answer_of_another_intent():
    labels = ["a"] * 5 + ["b"] * 3 + ["c"] * 2 + ["d"]
    source = moved_responses(labels, seed=1)
    assert sorted(source) == list(range(len(labels)))  # each answer used once
    assert all(labels[j] != labels[i] for i, j in enumerate(source))
    with pytest.raises(ValueError, match="more than half"):
        moved_responses(["a", "a", "a", "b"])


def test_the_command_writes_a_shuffled_csv_and_keeps_questions_and_labels(tmp_path, capsys):
    data = tmp_path / "train.csv"
    rows = [
        {"instruction": f"q{i}", "intent": f"i{i % 4}", "response": f"answer of i{i % 4} #{i}"}
        for i in range(12)
    ]
    with open(data, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "out" / "shuffled.csv"
    assert main(["shuffle-intents", str(data), "--out", str(out)]) == 0
    assert (
        "12 of 12 responses moved to a row of another intent (4 intents)" in capsys.readouterr().out
    )
    with open(out, newline="") as fh:
        got = list(csv.DictReader(fh))
    assert [(r["instruction"], r["intent"]) for r in got] == [
        (r["instruction"], r["intent"]) for r in rows
    ]
    assert all(not r["response"].startswith(f"answer of {r['intent']} ") for r in got)
    assert Counter(r["response"] for r in got) == Counter(r["response"] for r in rows)
    plain = tmp_path / "plain.csv"
    argv = [
        "shuffle-intents",
        str(data),
        "--out",
        str(out),
        "--skip-first",
        "4",
        "--unshuffled-out",
        str(plain),
    ]
    assert main(argv) == 0
    assert "8 of 8 responses moved" in capsys.readouterr().out
    with open(plain, newline="") as fh:
        assert list(csv.DictReader(fh)) == rows[4:]
    assert main(["shuffle-intents", str(tmp_path / "none.csv"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
