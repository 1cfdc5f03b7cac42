"""eval/scoring_rows.py: an adapter trained with passages is scored on the customer's own
question; its held-out rows never see one another as passages."""

from __future__ import annotations

import json
from dataclasses import asdict

from eval.scoring_rows import select_rows
from finetune.config import DataArgs
from finetune.data import prepare


def test_rows_of_an_adapter_trained_with_passages_are_prompted_plainly(tmp_path, tiny_llama_dir):
    from transformers import AutoTokenizer

    path = tmp_path / "support.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "instruction": f"how do I track order {i}",
                    "intent": "track_order",
                    "response": f"Answer {i}: order {i} ships soon.",
                }
            )
            + "\n"
            for i in range(60)
        )
    )
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    args = DataArgs(
        path=str(path), with_passages=2, max_samples=40, val_fraction=0.25, max_length=128
    )
    trained = prepare(args, tok)
    manifest = {
        "data": {
            **{k: v for k, v in asdict(args).items() if k != "path"},
            "fingerprint": trained.fingerprint,
            "mapping": asdict(trained.mapping),
            "train_rows": len(trained.train),
            "val_rows": len(trained.val),
        }
    }
    rows = select_rows(tok, {"grounded": manifest}, str(path), 20)
    assert rows.held_out and len(rows.prompts) == 20 and "beyond its max_samples" in rows.note
    assert not set(rows.references) & set(trained.rows_raw["train"]["response"])
    for prompt, ids in zip(rows.prompts, rows.prompt_ids, strict=True):
        text = tok.decode(ids)
        assert prompt in text and "The team answered:" not in text
