"""finetune.data: loading each format, column mapping, chat formatting and label masking,
truncation, split, fingerprint, persistence and the prepare-data command."""

from __future__ import annotations

import json
import shutil

import pytest

from finetune import data
from finetune.config import DataArgs
from finetune.data.format import IGNORE_INDEX, ChatFormat

ROWS = [
    {
        "instruction": f"where is my order {{{{Order Number}}}} #{i}? é ü 😀",
        "response": (
            f"Your order {{{{Order Number}}}} ships in {i} days. Track it on {{{{Website URL}}}}."
        ),
        "intent": "track_order" if i % 3 else "get_refund",
        "category": "ORDER",
        "flags": "B",
    }
    for i in range(24)
]


def write(path, rows, fmt=None):
    """Write rows as the format named by the file extension (or ``fmt``)."""
    import pandas as pd

    fmt = fmt or path.suffix.lstrip(".")
    if fmt == "jsonl":
        path.write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    elif fmt == "json":
        path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        pd.DataFrame(rows).to_csv(path, index=False, sep="\t" if fmt == "tsv" else ",")
    elif fmt == "parquet":
        pd.DataFrame(rows).to_parquet(path)
    elif fmt == "disk":
        from datasets import Dataset

        Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def llama_tok(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


@pytest.fixture(scope="module")
def gpt2_tok(tiny_gpt2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_gpt2_dir)


@pytest.fixture
def support_file(tmp_path):
    return write(tmp_path / "support.jsonl", ROWS)


def labels_text(tok, row) -> str:
    return tok.decode([t for t in row["labels"] if t != IGNORE_INDEX])


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "tsv", "parquet", "disk"])
def test_every_format_loads_the_same_rows(tmp_path, fmt):
    path = write(tmp_path / (f"rows.{fmt}" if fmt != "disk" else "saved"), ROWS, fmt)
    ds = data.load_rows(path)
    assert ds.num_rows == len(ROWS)
    assert ds[0]["instruction"] == ROWS[0]["instruction"]  # placeholders and unicode intact
    assert ds[5]["response"] == ROWS[5]["response"]


def test_folder_of_jsonl_files_loads_all_of_them(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write(folder / "a.jsonl", ROWS[:10])
    write(folder / "b.jsonl", ROWS[10:])
    assert data.load_rows(folder).num_rows == len(ROWS)


def test_csv_cells_stay_text(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt,completion\n007,NA\nnull,1e5\n", encoding="utf-8")
    ds = data.load_rows(path)
    assert ds["prompt"][:] == ["007", "null"] and ds["completion"][:] == ["NA", "1e5"]


@pytest.mark.parametrize(
    "columns, expected",
    [
        (
            ["flags", "instruction", "category", "intent", "response"],
            dict(prompt="instruction", response="response", intent="intent"),
        ),
        (["prompt", "completion"], dict(prompt="prompt", response="completion")),
        (["Question", "Answer"], dict(prompt="Question", response="Answer")),
        (["input", "output"], dict(prompt="input", response="output")),
        (
            ["instruction", "input", "output"],
            dict(prompt="instruction", response="output", context="input"),
        ),
        (["messages", "intent"], dict(messages="messages", intent="intent")),
        (["conversations"], dict(messages="conversations")),
    ],
)
def test_mapping_detected_for_common_shapes(columns, expected):
    assert data.detect_mapping(columns, DataArgs()) == data.ColumnMapping(**expected)


def test_explicit_columns_win_and_missing_ones_are_named():
    args = DataArgs(prompt_column="text", response_column="reply")
    got = data.detect_mapping(["prompt", "completion", "text", "reply"], args)
    assert (got.prompt, got.response) == ("text", "reply")
    with pytest.raises(ValueError, match="'nope' is not in the data"):
        data.detect_mapping(["prompt", "completion"], DataArgs(prompt_column="nope"))
    with pytest.raises(ValueError, match="columns: a, b"):
        data.detect_mapping(["a", "b"], DataArgs())


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_labels_are_the_response_then_end_of_turn(tmp_path, llama_tok, fmt):
    path = write(tmp_path / f"s.{fmt}", ROWS)
    prepared = data.prepare(DataArgs(path=str(path), max_length=256), llama_tok)
    chat = ChatFormat(llama_tok)
    for split in ("train", "val"):
        for row, raw in zip(getattr(prepared, split), prepared.rows_raw[split], strict=True):
            assert labels_text(llama_tok, row) == raw["response"] + "<|im_end|>"
            assert row["input_ids"][-1] == llama_tok.convert_tokens_to_ids("<|im_end|>")
            prompt_ids = llama_tok(chat.prompt_text(raw["prompt"]), add_special_tokens=False)[
                "input_ids"
            ]
            assert row["input_ids"][: len(prompt_ids)] == prompt_ids
            assert set(row["labels"][: len(prompt_ids)]) == {IGNORE_INDEX}
            assert row["length"] == len(row["input_ids"]) == len(row["labels"])
    assert "{{Order Number}}" in llama_tok.decode(prepared.train[0]["input_ids"])


def test_system_prompt_is_in_the_input_not_the_labels(support_file, llama_tok):
    args = DataArgs(path=str(support_file), system_prompt="You are Acme support.")
    row = data.prepare(args, llama_tok).train[0]
    text = llama_tok.decode(row["input_ids"])
    assert text.startswith(
        "<|im_start|>system\nYou are Acme support.<|im_end|>\n<|im_start|>user\n"
    )
    assert "Acme" not in labels_text(llama_tok, row)


def test_messages_rows_train_every_reply_or_the_last_only(tmp_path, llama_tok):
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "refund?"},
        {"role": "assistant", "content": "I can help you get a refund."},
    ]
    rows = [{"messages": convo}] * 3 + [
        {
            "messages": [
                {"from": "human", "value": "track order"},
                {"from": "gpt", "value": "Use the link."},
            ]
        }
    ]
    path = str(write(tmp_path / "m.jsonl", rows))
    every = data.prepare(DataArgs(path=path, val_fraction=0), llama_tok)
    decoded = {labels_text(llama_tok, r) for r in every.train}
    assert decoded == {
        "Hello!<|im_end|>I can help you get a refund.<|im_end|>",
        "Use the link.<|im_end|>",
    }
    prepared = data.prepare(DataArgs(path=path, val_fraction=0, last_turn_only=True), llama_tok)
    decoded = {labels_text(llama_tok, r) for r in prepared.train}
    assert decoded == {"I can help you get a refund.<|im_end|>", "Use the link.<|im_end|>"}
    long = next(r for r in prepared.train if len(r["input_ids"]) > 30)
    assert "Hello!<|im_end|>" in llama_tok.decode(long["input_ids"])  # history kept as context


def test_gpt2_without_template_uses_the_fallback(support_file, gpt2_tok):
    prepared = data.prepare(DataArgs(path=str(support_file)), gpt2_tok)
    row, raw = prepared.train[0], prepared.rows_raw["train"][0]
    assert prepared.stats["template"] == "fallback"
    assert gpt2_tok.decode(row["input_ids"]) == (
        f"### Instruction:\n{raw['prompt']}\n\n### Response:\n{raw['response']}<|endoftext|>"
    )
    assert labels_text(gpt2_tok, row) == raw["response"] + "<|endoftext|>"


def test_prompt_that_is_not_a_token_prefix_falls_back_to_concatenation(llama_tok):
    tok = llama_tok.__class__.from_pretrained(llama_tok.name_or_path)
    # The generation prompt says "A:" but a rendered reply starts "R:": not a token prefix.
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'user' %}U: {{ m['content'] }}\n"
        "{% else %}R: {{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}A:{% endif %}"
    )
    out = ChatFormat(tok).encode_batch(
        {"prompt": ["track order"], "response": ["Use the link."], "history": [""]}, 64, "drop"
    )
    assert tok.decode(out["input_ids"][0]) == "U: track order\nA:Use the link.<|im_end|>"
    assert labels_text(tok, {"labels": out["labels"][0]}) == "Use the link.<|im_end|>"


def test_truncation_policies_are_counted(tmp_path, llama_tok):
    rows = [{"prompt": "hi", "completion": "word " * 200}] * 6 + [
        {"prompt": "hi", "completion": "ok"}
    ] * 4
    rows += [{"prompt": "long " * 100, "completion": "ok"}] * 2
    path = write(tmp_path / "t.jsonl", rows)
    cut = data.prepare(DataArgs(path=str(path), max_length=64, val_fraction=0), llama_tok)
    assert cut.stats["truncated"] == 6 and cut.stats["dropped_prompt_too_long"] == 2
    assert cut.stats["rows_train"] == 10
    eot = llama_tok.convert_tokens_to_ids("<|im_end|>")
    for row in cut.train:
        assert row["length"] <= 64 and row["labels"][-1] == eot
    dropped = data.prepare(
        DataArgs(path=str(path), max_length=64, val_fraction=0, truncation="drop"), llama_tok
    )
    assert dropped.stats["dropped_too_long"] == 6 and dropped.stats["truncated"] == 0
    assert dropped.stats["rows_train"] == 4


def test_split_is_seeded_and_sized(support_file, llama_tok):
    def val_prompts(**kw):
        prepared = data.prepare(
            DataArgs(path=str(support_file), val_fraction=0.25, **kw), llama_tok
        )
        assert prepared.train.num_rows + prepared.val.num_rows == kw.get("max_samples", len(ROWS))
        return prepared.rows_raw["val"]["prompt"][:]

    assert len(val_prompts(seed=1)) == 6
    assert val_prompts(seed=1) == val_prompts(seed=1)
    assert val_prompts(seed=1) != val_prompts(seed=2)
    assert len(val_prompts(seed=1, max_samples=8)) == 2


def test_fingerprint_follows_content_mapping_and_length_only(tmp_path, support_file, llama_tok):
    def fp(path=support_file, **kw):
        return data.prepare(DataArgs(path=str(path), **kw), llama_tok).fingerprint

    base = fp()
    moved = tmp_path / "elsewhere" / "renamed.jsonl"
    moved.parent.mkdir()
    shutil.copy(support_file, moved)
    assert len(base) == 16 and fp(moved) == base  # name and place do not count
    assert fp(packing=False) == base  # collation does not change the examples
    assert fp(max_length=128) != base
    assert fp(prompt_column="category") != base
    changed = write(tmp_path / "changed.jsonl", ROWS[:-1] + [{**ROWS[-1], "response": "Other."}])
    assert fp(changed) != base


def test_stats_describe_the_data(support_file, llama_tok):
    stats = data.prepare(DataArgs(path=str(support_file), val_fraction=0.1), llama_tok).stats
    assert stats["rows_loaded"] == 24 and stats["rows_train"] + stats["rows_val"] == 24
    assert dict(stats["intents"]) == {"track_order": 16, "get_refund": 8}
    tokens = stats["tokens"]
    assert 0 < tokens["p50"] <= tokens["p90"] <= tokens["p99"] <= tokens["max"] <= 256
    assert stats["mapping"]["prompt"] == "instruction" and stats["end_of_turn"] == "<|im_end|>"


def test_save_and_load_round_trip(tmp_path, support_file, llama_tok):
    prepared = data.prepare(DataArgs(path=str(support_file)), llama_tok)
    back = data.load_prepared(data.save_prepared(prepared, tmp_path / "out"))
    assert back.fingerprint == prepared.fingerprint and back.mapping == prepared.mapping
    assert back.train["input_ids"][:] == prepared.train["input_ids"][:]
    assert back.rows_raw["val"]["response"][:] == prepared.rows_raw["val"]["response"][:]


def _cli(argv):
    import finetune.__main__ as cli

    table = {"prepare-data": cli.COMMANDS["prepare-data"]}  # other commands are not needed here
    original, cli.COMMANDS = cli.COMMANDS, table
    try:
        return cli.main(argv)
    finally:
        cli.COMMANDS = original


def test_prepare_data_command_writes_and_reuses(home, support_file, tiny_llama_dir, capsys):
    argv = [
        "prepare-data",
        "--data",
        str(support_file),
        "--model",
        str(tiny_llama_dir),
        "--max-length",
        "128",
    ]
    assert _cli(argv) == 0
    out = capsys.readouterr().out
    assert "prompt=instruction, response=response, intent=intent" in out
    assert "track_order 16" in out and "p50" in out
    (folder,) = (home / "datasets").iterdir()
    assert data.load_prepared(folder).train.num_rows > 0
    assert _cli(argv) == 0 and "reused" in capsys.readouterr().out


def test_prepare_data_command_reports_bad_input_in_one_line(home, tmp_path, tiny_llama_dir, capsys):
    bad = tmp_path / "empty.csv"
    bad.write_text("")
    assert _cli(["prepare-data", "--data", str(bad), "--model", str(tiny_llama_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: empty.csv") and err.count("\n") == 1


def test_prepare_data_refuses_columns_it_cannot_tell_apart_before_the_model_resolves(
    home, tmp_path, capsys
):
    """The model resolved first (a first conversion's progress bars, or its own refusal), and
    only then was the file's sentence said."""
    rows = tmp_path / "rows.csv"
    rows.write_text("first,second\nhi,there\n")
    argv = ["prepare-data", "--data", str(rows), "--model", "nonexistent/xyz"]
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rows.csv: could not tell which columns hold the prompt and ")
    assert err.count("\n") == 1 and "nonexistent" not in err


def test_prepare_data_to_an_existing_out_is_refused_in_one_line(
    home, support_file, tiny_llama_dir, tmp_path, capsys
):
    """It tokenized the whole file, then failed as an internal error (FileExistsError, exit 1),
    for a folder it wrote before as for any other path: a sentence, exit 2, nothing touched."""
    argv = ["prepare-data", "--data", str(support_file), "--model", str(tiny_llama_dir)]
    written = tmp_path / "prepared"
    assert _cli([*argv, "--out", str(written)]) == 0
    before = sorted(p.relative_to(written) for p in written.rglob("*"))
    capsys.readouterr()
    for out, said in ((written, "already holds a prepared dataset"), (support_file, "exists")):
        assert _cli([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out} ") and said in err and err.count("\n") == 1
    assert sorted(p.relative_to(written) for p in written.rglob("*")) == before
    assert data.load_prepared(written).train.num_rows > 0


@pytest.mark.parametrize("name", ["bitext_v1_train.csv", "bitext_v11_first5000.csv"])
def test_real_bitext_files_map_automatically(bitext_dir, name):
    ds = data.load_rows(bitext_dir / name)
    mapping = data.detect_mapping(ds.column_names, DataArgs())
    assert (mapping.prompt, mapping.response, mapping.intent) == (
        "instruction",
        "response",
        "intent",
    )
    assert ds.num_rows >= 4000


@pytest.mark.slow
def test_real_model_labels_on_real_bitext(bitext_dir, default_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(default_model_dir.path)
    args = DataArgs(
        path=str(bitext_dir / "bitext_v11_first5000.csv"),
        max_length=1024,
        max_samples=300,
        val_fraction=0.1,
    )
    prepared = data.prepare(args, tok)
    assert prepared.stats["truncated"] == 0 and prepared.stats["end_of_turn"] == "<|im_end|>"
    for row, raw in zip(prepared.train, prepared.rows_raw["train"], strict=True):
        assert labels_text(tok, row) == raw["response"] + "<|im_end|>"
        assert tok.decode(row["input_ids"]).startswith("<|im_start|>system\n")


def test_rows_the_template_rejects_are_dropped_and_counted(tmp_path, llama_tok):
    tok = llama_tok.__class__.from_pretrained(llama_tok.name_or_path)
    tok.chat_template = (
        "{% for m in messages %}{% if m['content'] == 'boom' %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    rows = [{"prompt": "hi", "completion": "hello"}] * 4 + [{"prompt": "boom", "completion": "x"}]
    path = write(tmp_path / "t.jsonl", rows)
    stats = data.prepare(DataArgs(path=str(path), val_fraction=0), tok).stats
    assert stats["dropped_template_error"] == 1 and stats["rows_train"] == 4


def test_nothing_left_after_tokenizing_is_an_error(tmp_path, llama_tok):
    path = write(tmp_path / "long.jsonl", [{"prompt": "long " * 100, "completion": "ok"}] * 3)
    with pytest.raises(ValueError, match=r"long.jsonl: no training row .*\(3 prompt too long"):
        data.prepare(DataArgs(path=str(path), max_length=32), llama_tok)
