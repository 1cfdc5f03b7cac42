"""bench/answer_check.py: the check's outcomes counted on a made-up labelled table."""

from __future__ import annotations

import csv

from bench.answer_check import main, measure

WORDS = {
    "track_order": "parcel tracking where",
    "get_refund": "money back refund",
    "cancel_order": "cancel stop order",
}


def rows(n: int) -> list[dict]:
    intents = list(WORDS)
    return [
        {
            "instruction": f"please {WORDS[intents[i % 3]]} {i}",
            "intent": intents[i % 3],
            "response": f"Answer about {WORDS[intents[i % 3]]} number {i}.",
        }
        for i in range(n)
    ]


def test_reference_answers_pass_and_other_intents_answers_are_answered_again():
    m = measure(rows(60), held=12, seed=0)
    assert (m["past_answers"], m["held"], m["question_accuracy"]) == (48, 12, 1.0)
    assert m["reference"]["ok"] == 12
    shuffled = m["shuffled"]
    # Shuffled answers of another intent are re-answered with the asked intent; those that
    # landed on a row of the same intent pass.
    assert shuffled["ok"] + shuffled["re-answered"] == 12 and shuffled["re-answered"] >= 6
    assert shuffled["re-answered right"] == shuffled["re-answered"]


def test_the_command_prints_the_table_and_refuses_a_bad_file(tmp_path, capsys):
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["instruction", "intent", "response"])
        writer.writeheader()
        writer.writerows(rows(60))
    assert main(["--data", str(path), "--held", "12"]) == 0
    out = capsys.readouterr().out
    assert "48 labelled past answers" in out and "| reference | 12 | 0 | 0 | 0 | 0 |" in out
    assert main(["--data", str(tmp_path / "none.csv")]) == 2
    assert "cannot measure" in capsys.readouterr().err
