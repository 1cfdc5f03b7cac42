"""finetune/train/past_answers.py: training puts its training split, and only it, on the shelf."""

from __future__ import annotations

import json

import pytest

from finetune import data
from finetune.config import DataArgs
from knowledge.store import KnowledgeShelf


@pytest.fixture
def unique_rows(tmp_path):
    """40 rows, each answer its own (so a row of the evaluation split is findable by it)."""
    path = tmp_path / "support.jsonl"
    rows = [
        {
            "instruction": f"question {i} about order {i}",
            "intent": "track_order",
            "response": f"Answer {i}: your parcel {i} is on its way.",
        }
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def shelf_texts(version) -> set[str]:
    return {p.text for _, p in version.passages_page()}


def test_only_the_training_split_goes_on_the_shelf(home, tiny_llama_dir, unique_rows):
    from transformers import AutoTokenizer

    from finetune.train.past_answers import shelve_train_split

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    prepared = data.prepare(DataArgs(path=str(unique_rows), val_fraction=0.25), tok)
    train, val = (
        set(prepared.rows_raw["train"]["response"]),
        set(prepared.rows_raw["val"]["response"]),
    )
    assert train and val and not train & val
    entry = shelve_train_split(prepared, str(unique_rows))
    version = KnowledgeShelf().get(entry["name"], entry["version"])
    assert entry["name"] == "answers-support" and entry["passages"] == len(train)
    assert shelf_texts(version) == train and not shelf_texts(version) & val
    for question in prepared.rows_raw["val"][
        "prompt"
    ]:  # an evaluated question never finds its answer
        assert not {h.passage.text for h in version.search(question, 5)} & val
    assert version.extra == {"dataset_fingerprint": prepared.fingerprint, "split": "train"}
    again = shelve_train_split(prepared, str(unique_rows))  # the same data: the same version
    assert again == entry and len(KnowledgeShelf().versions("answers-support")) == 1


def test_a_failure_is_a_warning_not_a_lost_adapter():
    from finetune.train.past_answers import shelve_or_warn

    events = []

    class Empty:
        rows_raw: dict = {}

    assert shelve_or_warn(Empty(), "x.jsonl", lambda kind, **f: events.append((kind, f))) is None
    assert events[0][0] == "warning" and "knowledge shelf" in events[0][1]["message"]


def test_the_adapter_manifest_names_the_knowledge_version(tiny_llama_dir, home):
    from finetune.config import RunConfig
    from finetune.train import train

    cfg = RunConfig()
    cfg.model.name = str(tiny_llama_dir)
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = "assets/demo_support.jsonl", 48, 96
    cfg.data.val_fraction = 0.25
    cfg.lora.r, cfg.lora.alpha = 4, 8
    t = cfg.train
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        1,
        4,
        1,
        0,
        0,
        0,
    )
    result = train(cfg)
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    entry = manifest["knowledge"]
    version = KnowledgeShelf().get(entry["name"], entry["version"])
    assert (entry["name"], entry["split"]) == ("answers-demo_support", "train")
    assert entry["passages"] == manifest["data"]["train_rows"] == version.passages
    assert version.extra["dataset_fingerprint"] == manifest["data"]["fingerprint"]


def test_train_with_passages_end_to_end_from_the_command_line(home, tiny_llama_dir, capsys):
    """`python -m finetune train --with-passages 2`: 3 steps, an adapter whose manifest says so,
    and a dry run whose memory estimate counts the longer rows."""
    from finetune.__main__ import main
    from finetune.data.passages import PASSAGE_TOKENS

    common = [
        "--model",
        str(tiny_llama_dir),
        "--data",
        "assets/demo_support.jsonl",
        "--max-samples",
        "40",
        "--max-length",
        "96",
        "--batch-size",
        "4",
        "--lora-r",
        "4",
        "--max-steps",
        "3",
        "--eval-every",
        "0",
        "--probe-every",
        "0",
        "--quiet",
    ]
    assert main(["train", *common, "--dry-run"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["train", *common, "--dry-run", "--with-passages", "2"]) == 0
    grounded = json.loads(capsys.readouterr().out)
    assert grounded["estimate"]["activations_gib"] > 2 * plain["estimate"]["activations_gib"]
    assert grounded["tokens_per_micro_batch"] > plain["tokens_per_micro_batch"]

    assert main(["train", *common, "--with-passages", "2", "--name", "grounded-tiny"]) == 0
    manifest = json.loads((home / "adapters" / "grounded-tiny" / "manifest.json").read_text())
    assert manifest["steps"] == 3 and manifest["data"]["with_passages"] == 2
    shown = manifest["data"]["passages"]
    assert shown["token_limit"] == 96 + 2 * PASSAGE_TOKENS
    rows = manifest["data"]["train_rows"] + manifest["data"]["val_rows"]
    assert sum(shown["rows_by_passages_shown"].values()) == rows
    knowledge = manifest["knowledge"]
    assert knowledge["name"] == "answers-demo_support" and knowledge["split"] == "train"
    assert knowledge["fingerprint"] == shown["knowledge_fingerprint"]
    version = KnowledgeShelf().get(knowledge["name"], knowledge["version"])
    assert version.passages == manifest["data"]["train_rows"]
    # --passage-share 0.5: only some training rows are shown a passage (the rest train plainly).
    # This tokenizer spends a token a character or so: rows get the room a passage needs.
    half_share = ["--with-passages", "1", "--passage-share", "0.5", "--max-length", "600"]
    assert main(["train", *common, *half_share, "--name", "grounded-half"]) == 0
    half = json.loads((home / "adapters" / "grounded-half" / "manifest.json").read_text())
    data = half["data"]
    assert data["passage_share"] == data["passages"]["passage_share"] == 0.5
    by_shown = data["passages"]["rows_by_passages_shown"]
    assert 0 < by_shown["1"] < by_shown["0"]  # 13 and 27 of 40 (every row fitting: 30 and 10)
