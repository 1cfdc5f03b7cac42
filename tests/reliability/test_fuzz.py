"""Fuzzing with hypothesis, every case counted: the dataset loader, the run config (dicts,
files and the Train form) and the generation settings.

The property is always the same: an input is used or refused with one ``ValueError`` that
says why; no other exception, no crash (a segfault in a parser would end this process, so
finishing is part of the proof). Counts per outcome land in test-artifacts/fuzz_counts.json
(see tally.py). tests/finetune/data/test_data_bad_input.py fuzzes dataset rows and CSV bytes too.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from tally import FUZZ

from core.hardware import detect
from finetune.config import RunConfig, validate
from finetune.data.load import load_rows
from inference.generate import GenerationSettings

FUZZ_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module", autouse=True)
def _datasets_cache(tmp_path_factory):
    """Keep the datasets library's Arrow cache of hundreds of fuzzed files out of ~/.cache."""
    import datasets

    old = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = str(tmp_path_factory.mktemp("datasets-cache"))
    yield
    datasets.config.HF_DATASETS_CACHE = old


# --- fuzzing: the dataset loader ---------------------------------------------------------------

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
row_value = st.dictionaries(
    st.sampled_from(["prompt", "completion", "messages", "text", "x"]), json_value, max_size=4
)


_SERIAL = itertools.count()


def _deep(depth: int, opener: str) -> bytes:
    closer = {"[": "]", '{"a":': "}"}[opener]
    return (
        '{"prompt": '
        + opener * depth
        + "1" * (opener != "[")
        + closer * depth
        + ', "completion": "x"}\n'
    ).encode()


file_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(row_value, min_size=1, max_size=5).map(
        lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode()
    ),
    json_value.map(lambda v: json.dumps(v).encode()),
    st.builds(_deep, st.integers(1, 400), st.sampled_from(["[", '{"a":'])),
    st.lists(st.lists(st.text(max_size=10), min_size=1, max_size=4), min_size=1, max_size=5).map(
        lambda rs: "\n".join(",".join(r) for r in rs).encode()
    ),
    st.tuples(st.text(max_size=60), st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1"])).map(
        lambda t: t[0].encode(t[1], errors="replace")
    ),
)


@FUZZ_SETTINGS
@given(content=file_bytes, suffix=st.sampled_from([".jsonl", ".json", ".csv", ".tsv", ".parquet"]))
def test_fuzz_the_loader_rows_or_one_clear_error(tmp_path, content, suffix):
    # A new name each time: datasets caches by path, size and mtime, which a rewrite may keep.
    path = tmp_path / f"fuzzed-{next(_SERIAL)}{suffix}"
    path.write_bytes(content)
    try:
        rows = load_rows(path)
    except ValueError as err:
        assert path.name in str(err), str(err)
        FUZZ.add("dataset loader", "refused")
        return
    assert rows.num_rows >= 1 and rows.column_names
    FUZZ.add("dataset loader", "loaded")


# --- fuzzing: config validation ---------------------------------------------------------------

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(
        [
            "auto",
            "cpu",
            "fp32",
            "none",
            "cosine",
            "adamw",
            "drop",
            "",
            "default",
            "../x",
            "assets/demo_support.jsonl",
        ]
    ),
)


def _near(default):
    """Mostly a field's own default (so some configs pass), otherwise anything at all."""
    return st.integers(0, 3).flatmap(lambda i: anything if i == 0 else st.just(default))


_DEFAULTS = {
    section.name: {
        f.name: getattr(section.default_factory(), f.name)
        for f in fields(section.default_factory())
    }
    for section in fields(RunConfig)
}
config_dict = st.fixed_dictionaries(
    {
        section: st.fixed_dictionaries({}, optional={name: _near(v) for name, v in values.items()})
        for section, values in _DEFAULTS.items()
    }
)
_INT_FIELDS = {
    ("lora", "r"),
    ("lora", "alpha"),
    ("data", "max_length"),
    ("data", "seed"),
    ("train", "grad_accum"),
    ("train", "max_steps"),
    ("train", "log_every"),
    ("train", "seed"),
    ("train", "cpu_threads"),
    ("run", "nproc_per_node"),
}
_AUTO_INT_FIELDS = ("eval_every", "probe_every", "save_every")  # None = auto
HW = detect()


@settings(FUZZ_SETTINGS, max_examples=500)
@given(d=st.integers(0, 4).flatmap(lambda i: anything if i == 0 else config_dict))  # 1 in 5: junk
def test_fuzz_config_validation_lists_problems_and_never_raises(d):
    try:
        cfg = RunConfig.from_dict(d)
    except ValueError:
        FUZZ.add("config validation", "refused by from_dict")
        return
    problems = validate(cfg, HW)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)
    if problems:
        FUZZ.add("config validation", "problems listed")
        return
    for section, name in _INT_FIELDS:  # what passes can be trained with: right types, finite
        value = getattr(getattr(cfg, section), name)
        assert isinstance(value, int) and not isinstance(value, bool), (section, name, value)
    batch = cfg.train.batch_size  # a number, or "auto" (finetune/train/batch_fit.py)
    assert batch == "auto" or (isinstance(batch, int) and not isinstance(batch, bool)), batch
    for name in _AUTO_INT_FIELDS:
        value = getattr(cfg.train, name)
        assert value is None or (isinstance(value, int) and not isinstance(value, bool)), (
            name,
            value,
        )
    for value in (
        cfg.train.learning_rate,
        cfg.train.epochs,
        cfg.lora.dropout,
        cfg.data.val_fraction,
        cfg.train.time_budget_s,
    ):
        assert isinstance(value, (int, float)) and math.isfinite(value)
    assert isinstance(cfg.model.name, str) and isinstance(cfg.data.path, str)
    FUZZ.add("config validation", "valid")


@settings(FUZZ_SETTINGS, max_examples=200)
@given(
    content=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        config_dict.map(lambda d: json.dumps(d, default=str).encode()),
        st.integers(1, 3000).map(lambda n: ("[" * n + "]" * n).encode()),
    ),
    suffix=st.sampled_from([".json", ".yaml"]),
)
def test_fuzz_config_files_load_or_raise_one_value_error(tmp_path, content, suffix):
    path = tmp_path / f"run{suffix}"
    path.write_bytes(content)
    try:
        cfg = RunConfig.load(path)
    except ValueError:
        FUZZ.add("config file", "refused")
        return
    assert isinstance(validate(cfg), list)
    FUZZ.add("config file", "loaded")


@settings(FUZZ_SETTINGS, max_examples=300)
@given(changes=st.dictionaries(st.integers(0, 37), anything, max_size=4))
def test_fuzz_train_form_values_give_problems_not_tracebacks(changes):
    from ui.views import forms

    values = forms.form_values(forms.ui_defaults())  # the form as it opens, then edited
    assert len(values) == len(forms.TRAIN_FIELDS) == 38  # one per Train tab setting
    for index, value in changes.items():
        values[index] = value
    cfg, problems = forms.to_config("assets/demo_support.jsonl", values)
    problems += validate(cfg, HW)
    assert all(isinstance(p, str) for p in problems)
    FUZZ.add("train form", "refused" if problems else "valid")


# --- fuzzing: generation settings -------------------------------------------------------------


@settings(FUZZ_SETTINGS, max_examples=300)
@given(
    values=st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(anything, st.floats(-5, 5), st.integers(-5, 3000))
            for name in (
                "max_new_tokens",
                "temperature",
                "top_p",
                "top_k",
                "repetition_penalty",
                "seed",
                "min_new_tokens",
                "system_prompt",
            )
        },
    ).filter(lambda v: len(v) <= 3)
)
def test_fuzz_generation_settings_refused_or_in_range(values):
    s = GenerationSettings(**values)
    problems = s.validate()
    if problems:
        with pytest.raises(ValueError, match="invalid generation settings"):
            s.check()
        FUZZ.add("generation settings", "refused")
        return
    s.check()
    assert 1 <= s.max_new_tokens <= 2048 and 0 <= s.temperature <= 2 and 0 < s.top_p <= 1
    assert 1 <= s.repetition_penalty <= 2 and 0 <= s.min_new_tokens <= s.max_new_tokens
    FUZZ.add("generation settings", "valid")
