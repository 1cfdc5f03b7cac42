"""The committed demo data matches its generator and has the shape the rest of TuneDesk expects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parents[2] / "assets"
SCRIPT = ASSETS / "make_demo_data.py"
FILES = ("demo_support.jsonl", "golden.jsonl", "demo_help_center.md")
KEYS = ["flags", "instruction", "category", "intent", "response"]


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _load(ASSETS / "demo_support.jsonl")


@pytest.fixture(scope="module")
def golden() -> list[dict]:
    return _load(ASSETS / "golden.jsonl")


def test_script_reproduces_committed_files(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rows" in done.stdout
    for name in FILES:
        fresh = (tmp_path / name).read_bytes()
        assert fresh == (ASSETS / name).read_bytes(), f"{name} differs from the script's output"


def test_rows_shape(rows: list[dict]) -> None:
    assert len(rows) >= 2000
    assert len({r["intent"] for r in rows}) >= 20
    for r in rows:
        assert list(r) == KEYS
        assert all(isinstance(r[k], str) and r[k] for k in KEYS)
        assert set(r["flags"]) <= set("BLPQZ")


def test_placeholders_kept_literally(rows: list[dict]) -> None:
    for ph in ("{{Order Number}}", "{{Account Type}}", "{{Refund Amount}}", "{{Invoice Number}}"):
        assert any(ph in r["instruction"] for r in rows), ph
        assert any(ph in r["response"] for r in rows), ph
    # Lower-casing and typos never touch a placeholder.
    assert not any("{{order number}}" in r["instruction"] for r in rows)


def test_varied_instructions(rows: list[dict]) -> None:
    typo_rows = [r for r in rows if "Z" in r["flags"]]
    assert len(typo_rows) >= len(rows) // 10
    assert any("L" in r["flags"] for r in rows)
    assert len({r["response"] for r in rows}) >= 500


def test_no_duplicate_pairs(rows: list[dict]) -> None:
    pairs = [(r["instruction"], r["response"]) for r in rows]
    assert len(pairs) == len(set(pairs))


def test_responses_follow_house_style(rows: list[dict]) -> None:
    for r in rows:
        assert 40 <= len(r["response"].split()) <= 120
        assert "\n1. " in r["response"]
    track = [r["response"].lower() for r in rows if r["intent"] == "track_order"]
    assert track and all("tracking" in t and "{{order number}}" in t for t in track)
    human = [r["response"].lower() for r in rows if r["intent"] == "contact_human_agent"]
    assert human and all("connect you with" in t and "human agent" in t for t in human)


def test_golden_prompts(rows: list[dict], golden: list[dict]) -> None:
    assert 28 <= len(golden) <= 32
    assert len({g["id"] for g in golden}) == len(golden)
    instructions = {r["instruction"] for r in rows}
    intents = {r["intent"] for r in rows}
    for g in golden:
        assert list(g) == ["id", "intent", "prompt", "must_contain", "must_not_contain"]
        assert g["prompt"] not in instructions, g["prompt"]
        assert g["intent"] in intents
        assert g["must_contain"] and all(p == p.lower() for p in g["must_contain"])
        assert g["must_not_contain"]


def test_golden_phrases_are_learnable(rows: list[dict], golden: list[dict]) -> None:
    """Every must_contain phrase is in every demo response of that intent, none
    of the banned ones."""
    for g in golden:
        answers = [r["response"].lower() for r in rows if r["intent"] == g["intent"]]
        for phrase in g["must_contain"]:
            assert all(phrase in a for a in answers), (g["id"], phrase)
        for phrase in g["must_not_contain"]:
            assert not any(phrase in a for a in answers), (g["id"], phrase)


def test_the_help_center_imports_as_one_article_per_intent_each_found_by_its_title(
    home, rows: list[dict]
) -> None:
    from knowledge.importers import read_passages
    from knowledge.store import KnowledgeShelf

    passages = read_passages(ASSETS / "demo_help_center.md")
    assert len(passages) == len({r["intent"] for r in rows})
    assert all(p.kind == "article" and len(p.text.split()) > 30 for p in passages)
    # each labelled with the intent it answers, so that it outranks the past answers of it
    assert sorted(p.intent for p in passages) == sorted({r["intent"] for r in rows})
    assert all("<!--" not in p.text for p in passages)
    version, _ = KnowledgeShelf().add("help-center", passages, ["demo_help_center.md"])
    for passage in passages:  # "Cancelling an order" finds "Cancellation fees" first
        assert passage.title in [h.passage.title for h in version.search(passage.title, k=2)]
