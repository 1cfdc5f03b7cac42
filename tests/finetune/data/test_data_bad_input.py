"""Bad dataset input: every case is one ValueError naming the file and what was expected,
never a library traceback and never a silently empty dataset."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finetune import data
from finetune.config import DataArgs
from finetune.data import rows as data_rows
from finetune.data.checks import size_text
from finetune.data.format import IGNORE_INDEX


@pytest.fixture(scope="module")
def tok(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(path, match: str, **kw) -> str:
    with pytest.raises(ValueError) as info:
        data.load_rows(path, **kw)
    msg = str(info.value)
    assert path.name in msg and match in msg, msg
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("name", ["e.jsonl", "e.json", "e.csv", "e.parquet"])
def test_empty_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    refused(path, "the file is empty")


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("header.csv", "prompt,completion\n", "has no rows"),
        ("blank.jsonl", "\n\n\n", "has no rows"),
        (
            "broken.jsonl",
            '{"prompt": "a", "completion": "b"}\n{"prompt": oops}\n',
            "broken.jsonl: could not read it as JSON: line 2: Expecting value",
        ),
        ("scalar.json", "5", "could not read it as JSON"),
        ("mixed.jsonl", '["", {}]', "mixes objects (item 2) and strings (item 1)"),
    ],
)
def test_text_that_holds_no_rows(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    refused(path, match)


def test_none_of_the_expected_columns(tmp_path, tok):
    path = jsonl(tmp_path / "odd.jsonl", [{"foo": "a", "bar": "b"}])
    with pytest.raises(ValueError) as info:
        data.prepare(DataArgs(path=str(path)), tok)
    msg = str(info.value)
    assert "odd.jsonl" in msg and "columns: foo, bar" in msg and "--prompt-column" in msg


@pytest.mark.parametrize(
    "content, match",
    [
        (
            "prompt,completion\nhé,ok\n".encode("latin-1"),
            "not valid UTF-8 text (byte 0xe9 on line 2)",
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary content"),
        (b"prompt,completion\nok,\xe2\x82", "cut-off character"),
    ],
)
def test_non_utf8_and_binary(tmp_path, content, match):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    refused(path, match)


def test_bad_rows_are_skipped_and_counted(tmp_path, tok):
    rows = [{"prompt": "hi", "completion": "hello"}] * 5 + [
        {"prompt": None, "completion": "x"},
        {"prompt": 5, "completion": "x"},
        {"prompt": "  ", "completion": "x"},
        {"prompt": "hi"},
    ]
    prepared = data.prepare(DataArgs(path=str(jsonl(tmp_path / "mixed.jsonl", rows))), tok)
    stats = prepared.stats
    assert stats["rows_skipped"] == 4 and stats["rows_train"] + stats["rows_val"] == 5
    assert stats["skip_reasons"] == {"missing": 2, "not_text": 1, "empty": 1}
    assert stats["skipped_examples"][0] == "row 6: prompt is missing"


def test_all_rows_bad_is_an_error_naming_the_rows(tmp_path, tok):
    rows = [{"prompt": 1, "completion": "x"}, {"prompt": "q", "completion": ["x"]}]
    with pytest.raises(ValueError) as info:
        data.prepare(DataArgs(path=str(jsonl(tmp_path / "allbad.jsonl", rows))), tok)
    msg = str(info.value)
    assert "allbad.jsonl: none of the 2 rows is usable" in msg
    assert "row 1: prompt is int, expected text" in msg and "row 2: completion is list" in msg


def test_malformed_messages_are_skipped(tmp_path, tok):
    good = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    rows = [{"messages": good}] * 3 + [
        {"messages": "hi"},
        {"messages": [{"role": "user", "content": "x"}]},
        {"messages": [{"role": "alien", "content": "x"}]},
    ]
    stats = data.prepare(DataArgs(path=str(jsonl(tmp_path / "m.jsonl", rows))), tok).stats
    assert stats["skip_reasons"] == {"bad_messages": 2, "no_assistant_turn": 1}
    assert stats["rows_usable"] == 3


@pytest.mark.parametrize(
    "name, row",
    [
        ("huge.jsonl", lambda big: json.dumps({"prompt": big, "completion": "b"})),
        ("huge.csv", lambda big: f"prompt,completion\n{big},b"),
    ],
)
def test_a_100_mb_row_is_refused_before_parsing(tmp_path, name, row):
    path = tmp_path / name
    path.write_text(row("x" * 100_000_000))
    refused(path, "is over 8 MB")


def test_a_huge_field_in_a_json_array_is_refused_by_row_and_column(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(data_rows, "MAX_FIELD_CHARS", 1000)
    path = tmp_path / "big.json"
    path.write_text(
        json.dumps([{"prompt": "a", "completion": "b"}, {"prompt": "a" * 2000, "completion": "b"}])
    )
    with pytest.raises(
        ValueError, match=r"big.json: row 2, column 'prompt' holds 0.0 M characters"
    ):
        data.prepare(DataArgs(path=str(path)), tok)


def test_files_over_the_size_limit_are_refused(tmp_path):
    path = jsonl(tmp_path / "rows.jsonl", [{"prompt": "a", "completion": "b"}] * 100)
    msg = refused(path, "is over the limit of 100 bytes for one dataset file", max_bytes=100)
    assert "rows.jsonl: 3.4 KiB is over" in msg, msg  # not "0 MB is over the 0 MB limit"
    assert size_text(2**30) == "1 GiB" and size_text(5 << 19) == "2.5 MiB"


def test_missing_path_unsupported_type_and_fake_parquet(tmp_path):
    with pytest.raises(ValueError, match="nowhere.jsonl does not exist"):
        data.load_rows(tmp_path / "nowhere.jsonl")
    doc = tmp_path / "notes.docx"
    doc.write_text("hello")
    refused(doc, "unsupported file type '.docx'")
    fake = tmp_path / "fake.parquet"
    fake.write_text("prompt,completion\na,b\n")
    refused(fake, "not a Parquet file")


def test_hub_id_while_offline_says_so():
    with pytest.raises(ValueError, match="acme/support-chats .* HF_HUB_OFFLINE is set"):
        data.load_rows("acme/support-chats")


def test_folder_without_data_files(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="expected a save_to_disk folder or data files"):
        data.load_rows(tmp_path)


def test_a_folder_of_csv_files_with_different_columns_names_both(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "a.csv").write_text("question,answer\nWhere is it?,Under Orders.\n")
    (folder / "b.csv").write_text("instruction,response\nRefund?,Orders > Refund.\n")
    msg = refused(folder, "its files have different columns")
    assert "a.csv: question, answer; b.csv: instruction, response" in msg, msg
    (folder / "b.csv").write_text("answer,question\nOrders > Refund.,Refund?\n")  # order aside
    assert data.load_rows(folder)[1] == {"question": "Refund?", "answer": "Orders > Refund."}


cell = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(st.text(max_size=5), max_size=3),
    st.sampled_from(["{{Order Number}}", "<|im_end|>", "NA", "", " \n "]),
)
row = st.one_of(
    st.dictionaries(st.sampled_from(["prompt", "completion", "intent", "other"]), cell, max_size=4),
    st.fixed_dictionaries(
        {
            "prompt": st.text(min_size=1, max_size=60),
            "completion": st.text(min_size=1, max_size=200),
        }
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(row, min_size=1, max_size=8))
def test_random_rows_give_a_well_formed_dataset_or_a_value_error(tmp_path, tok, rows):
    path = tmp_path / "random.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        prepared = data.prepare(DataArgs(path=str(path), max_length=64), tok)
    except ValueError as err:
        assert "random.jsonl" in str(err)
        return
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    assert (
        prepared.train.num_rows + prepared.val.num_rows >= 1 or prepared.stats["rows_selected"] >= 1
    )
    for split in (prepared.train, prepared.val):
        for ex in split:
            assert len(ex["input_ids"]) == len(ex["labels"]) == ex["length"] <= 64
            assert ex["labels"][-1] == eot and ex["labels"][0] == IGNORE_INDEX


csv_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.lists(st.text(alphabet=string.printable + 'éü😀"', max_size=12), min_size=1, max_size=4),
        min_size=1,
        max_size=6,
    ).map(lambda rs: "\n".join(",".join(r) for r in rs).encode()),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=csv_bytes)
def test_random_csv_bytes_load_or_raise_value_error(tmp_path, content):
    path = tmp_path / "random.csv"
    path.write_bytes(content)
    try:
        ds = data.load_rows(path)
    except ValueError as err:
        assert "random.csv" in str(err)
        return
    assert ds.num_rows >= 1 and ds.column_names
