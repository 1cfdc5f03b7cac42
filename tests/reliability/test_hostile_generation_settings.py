"""Hostile generation settings and sizes: a bad setting, form value, batch or prompt length is
refused with a sentence naming it, in the session and in the Chat, Compare and Evaluate tabs,
before anything generates; the session keeps serving. (Uploads: test_hostile_uploads.py; names,
links and weights: test_hostile_names_and_weights.py; fuzzing: test_fuzz.py.)

Counts of what was tried land in test-artifacts/hostile_inputs.json (see tally.py).
"""

from __future__ import annotations

import math
import warnings

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from tally import HOSTILE
from ui_handlers import handlers, last

from inference.generate import (
    MAX_BATCH_ROWS,
    GenerationSettings,
    compare,
    generate_batch,
    stream_chat,
)
from inference.session import ModelSession

MSGS = [{"role": "user", "content": "Where is my order?"}]


@pytest.fixture(scope="module")
def ui(tiny_llama_dir) -> dict:
    return handlers(tiny_llama_dir)


@pytest.fixture
def session(tiny_llama_dir, home):
    return ModelSession(str(tiny_llama_dir), dtype="float32")


def _warnings_of(fn, *args) -> tuple[object, list[str]]:
    """Run a handler; return its (last) value and the gr.Warning texts it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = last(fn(*args))
    return value, [str(w.message) for w in caught]


# --- generation settings and batch sizes ------------------------------------------------------

BAD_SETTINGS = [
    ("max_new_tokens", 10**9),
    ("max_new_tokens", -5),
    ("max_new_tokens", 0),
    ("max_new_tokens", 2.5),
    ("max_new_tokens", True),
    ("max_new_tokens", "100"),
    ("max_new_tokens", None),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", -0.1),
    ("temperature", 3),
    ("temperature", "hot"),
    ("top_p", 0),
    ("top_p", 1.5),
    ("top_p", math.nan),
    ("top_k", -1),
    ("top_k", 10**6),
    ("repetition_penalty", 0.5),
    ("repetition_penalty", math.nan),
    ("seed", -1),
    ("seed", 2**70),
    ("seed", 1.5),
    ("min_new_tokens", 10**6),
    ("system_prompt", 42),
]


@pytest.mark.parametrize("field, value", BAD_SETTINGS, ids=[f"{f}={v!r}" for f, v in BAD_SETTINGS])
def test_bad_generation_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"invalid generation settings: {field} must"):
        GenerationSettings(**{field: value}).check()
    HOSTILE.add("generation settings", field)


def test_form_values_become_value_errors_never_type_errors(ui):
    engine = ui["engine"]
    good = ["", 200, 0.0, 0.9, 1.1, 0]
    assert engine.settings(*good[:5], 7.0).seed == 7
    for index, value in [(5, None), (1, None), (1, math.nan), (2, None), (3, "x"), (1, 10**7)]:
        values = list(good)
        values[index] = value
        said = "the Seed box is empty" if index == 5 else "invalid generation settings"
        with pytest.raises(ValueError, match=said):
            engine.settings(*values)
        HOSTILE.add("generation settings", "form value")


def test_the_ui_shows_refused_settings_and_sizes(ui, home):
    from ui.views.state import BASE_LABEL

    history, shown = _warnings_of(
        ui["respond"], [], "hello", BASE_LABEL, "", 200, 0.0, 0.9, 1.0, None
    )
    assert history[:2] == ([{"role": "user", "content": "hello"}], "")  # no half answer added
    assert history[2] == {"__type__": "update"}  # the Adapter dropdown as it was
    assert shown == ["the Seed box is empty: type a whole number of 0 or more"]
    panes, shown = _warnings_of(ui["run"], None, None, "hello", "", 0, 1.0)
    assert "max_new_tokens must be a whole number from 1 to 2048" in shown[0]
    assert panes[3] == ""  # no timing line: nothing ran
    names = [f"a{i}" for i in range(5)]
    status = ui["on_run"](names, "assets/demo_support.jsonl", 40, 128, 8, False, "intent", 0)[0]
    assert status.startswith("⚠️ cannot evaluate: 5 adapters, but the session holds at most 4")
    status = ui["on_run"](
        ["a0"], "assets/demo_support.jsonl", 10**6, 128, 1000, False, "intent", 0
    )[0]
    assert "max_samples must be a whole number from 1 to 10000, got 1000000" in status
    assert "batch_size must be a whole number from 1 to 64, got 1000" in status
    for case in ("chat", "compare", "evaluate adapters", "evaluate rows and batch"):
        HOSTILE.add("oversized settings in the UI", case)


def test_oversized_batches_and_prompts_are_refused_before_generating(session, home):
    settings = GenerationSettings(max_new_tokens=2)
    with pytest.raises(ValueError, match=f"65 answers in one call; at most {MAX_BATCH_ROWS}"):
        compare(session, MSGS, [None] * 65, settings)
    with pytest.raises(ValueError, match="5 different adapters in one call, but the session holds"):
        compare(session, MSGS, [None, "a", "b", "c", "d", "e"], settings)
    with pytest.raises(ValueError, match="65 answers in one call"):
        generate_batch(session, [MSGS] * 65, [None] * 65, settings)
    assert session.status()["state"] == "not loaded"  # refused before the model was touched

    pasted = [{"role": "user", "content": "where is my order " * 400}]  # far past 256 positions
    with pytest.raises(
        ValueError, match=r"the conversation is \d+ tokens; this model reads at most 256"
    ):
        compare(session, pasted, [None], settings)
    with pytest.raises(ValueError, match="this model reads at most 256"):
        next(stream_chat(session, pasted, None, settings))
    assert len(compare(session, MSGS, [None], settings)) == 1  # still serving, lock free
    for case in ("65 compare panes", "6 adapters in one call", "65 batch prompts", "a pasted book"):
        HOSTILE.add("oversized generation", case)
