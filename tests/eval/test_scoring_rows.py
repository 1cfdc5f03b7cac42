"""eval/scoring_rows.py: which rows an evaluation scores, in the columns the adapter trained on."""

from __future__ import annotations

import csv
from dataclasses import asdict

from eval.scoring_rows import select_rows
from finetune.config import DataArgs
from finetune.data import prepare


def _write(path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["customer_message", "agent_reply"])  # names training cannot guess
        out.writerows(rows)


def test_another_file_in_the_columns_training_was_told_scores_its_first_rows(
    tmp_path, tiny_llama_dir
):
    """The guide's columns.yaml case: trained with --prompt-column / --response-column, the
    adapter is scored on another file of the same columns (a held-out export). It was refused:
    "could not tell which columns ... name them with --prompt-column", flags eval has not."""
    from transformers import AutoTokenizer

    train_file, other = tmp_path / "train.csv", tmp_path / "held-out.csv"
    _write(train_file, [(f"where is order {i}", f"Order {i} ships soon.") for i in range(20)])
    _write(other, [(f"cancel order {i}", f"Order {i} is cancelled.") for i in range(5)])
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    args = DataArgs(
        path=str(train_file), prompt_column="customer_message", response_column="agent_reply"
    )
    trained = prepare(args, tok)
    manifest = {
        "data": {
            **{k: v for k, v in asdict(args).items() if k != "path"},
            "fingerprint": trained.fingerprint,
            "mapping": asdict(trained.mapping),
        }
    }
    rows = select_rows(tok, {"support": manifest}, str(other), 3)
    assert not rows.held_out and "does not reproduce" in rows.note
    assert rows.prompts == [f"cancel order {i}" for i in range(3)]
    assert rows.references == [f"Order {i} is cancelled." for i in range(3)]


def test_another_file_in_other_columns_scores_its_first_rows(tmp_path, tiny_llama_dir):
    """Rebuilding the adapter's split on a file whose columns differ (question / answer, where
    it trained on instruction / response) refused the evaluation: "prompt column 'instruction'
    is not in the data". Such a file cannot hold its training split: its first rows are scored."""
    import json

    from transformers import AutoTokenizer

    train_file, other = tmp_path / "train.jsonl", tmp_path / "other.jsonl"
    rows = [{"instruction": f"where is order {i}", "response": f"It ships {i}."} for i in range(20)]
    train_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": f"a{i}"}) + "\n" for i in range(5))
    )
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    args = DataArgs(path=str(train_file))
    trained = prepare(args, tok)
    manifest = {
        "data": {
            **{k: v for k, v in asdict(args).items() if k != "path"},
            "fingerprint": trained.fingerprint,
            "mapping": asdict(trained.mapping),
        }
    }
    rows = select_rows(tok, {"support": manifest}, str(other), 3)
    assert not rows.held_out and "does not reproduce" in rows.note
    assert (rows.prompts, rows.references) == (["q0", "q1", "q2"], ["a0", "a1", "a2"])
