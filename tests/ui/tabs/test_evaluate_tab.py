"""The Evaluate tab after training: it picks the adapter the run just saved, and its result
tables stay hidden until an evaluation fills them (an empty table shows columns "1 2 3")."""

from __future__ import annotations

import json
import time

from shelf_helpers import put_adapter
from ui_handlers import handlers

from core.events import write_status

TABLES = (
    "eval-metrics",
    "eval-support",
    "eval-grounding-rows",
    "eval-intents",
    "eval-worst",
    "eval-slices",
    "eval-samples",
    "eval-golden-table",
)


def finished_run(home, run_id: str, adapter: str, state: str = "done") -> None:
    """A training run's folder as the runner leaves it once ``adapter`` is saved."""
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    done = {"type": "done", "status": state, "step": 4, "total_steps": 4, "adapter": adapter}
    (run_dir / "events.jsonl").write_text(json.dumps({**done, "time": time.time()}) + "\n")
    write_status(run_dir, state=state, adapter=adapter, created=time.time())


def test_the_adapter_just_trained_is_picked_once_and_kept_picks_stay(home, varied_dir):
    put_adapter(varied_dir, "older")
    put_adapter(varied_dir, "fresh", seed=1)
    finished_run(home, "r1", "fresh")
    pick = handlers(varied_dir)["adapters_to_score"]
    update, offered = pick([], "r1", None)  # the tab opens right after the run
    assert update["value"] == ["fresh"] and sorted(update["choices"]) == ["fresh", "older"]
    assert offered == "fresh"
    assert pick([], "r1", offered)[0]["value"] == []  # taken out by hand: not put back
    assert pick(["older"], "r1", None)[0]["value"] == ["older", "fresh"]  # joins the user's picks
    assert pick(["gone", "older"], "r1", "fresh")[0]["value"] == ["older"]  # deleted ones drop out
    assert pick([], None, None)[0]["value"] == ["fresh"]  # after a reload: the latest run's


def test_a_run_still_training_or_not_on_the_shelf_picks_nothing(home, varied_dir):
    put_adapter(varied_dir, "older")
    finished_run(home, "r2", "still-going", state="running")
    pick = handlers(varied_dir)["adapters_to_score"]
    assert pick([], "r2", None)[0]["value"] == []
    finished_run(home, "r3", "never-saved")
    assert pick([], "r3", None)[0]["value"] == []


def test_result_tables_are_hidden_until_an_evaluation_fills_them(home, varied_dir):
    table = handlers(varied_dir)
    assert all(table["blocks"][t].visible is False for t in TABLES)
    # the adapter picker of the tables and the report files too: an empty dropdown and an
    # empty file box stood there before any run
    assert table["blocks"]["eval-which"].visible is False
    assert table["blocks"]["eval-files"].visible is False
    put_adapter(varied_dir, "tuned")
    outputs = (
        "status",
        "gate",
        *TABLES[:2],
        "notes",
        TABLES[2],
        "which",
        *TABLES[3:],
        "files",
        "report",
    )
    shown = dict(
        zip(
            outputs,
            table["on_run"](["tuned"], "assets/demo_support.jsonl", 4, 8, 4, False, "intent", 0),
            strict=True,
        )
    )
    assert shown["status"].startswith("Scored 4 rows"), shown["status"]
    for name in ("eval-metrics", "eval-samples", "eval-slices"):
        assert shown[name]["visible"] is True and len(shown[name]["value"]) > 0, name
    assert list(shown["eval-metrics"]["value"]["model"]) == ["base", "tuned"]
    assert shown["which"]["visible"] is True and shown["which"]["value"] == "tuned"
    assert shown["files"]["visible"] is True and len(shown["files"]["value"]) >= 2
    assert shown["eval-golden-table"] == {"__type__": "update", "value": None, "visible": False}
    refused = table["on_run"]([], "assets/demo_support.jsonl", 4, 8, 4, False, "intent", 0)
    assert refused[0] == "Pick at least one adapter."
    assert [u["visible"] for u in refused if isinstance(u, dict) and "visible" in u] == [False] * 10


def test_ground_in_offers_the_knowledge_bases_and_grounds_every_model_in_the_one_picked(
    home, varied_dir
):
    from knowledge.passages import Passage
    from knowledge.store import KnowledgeShelf
    from ui.views.evaluation import OWN_KNOWLEDGE

    table = handlers(varied_dir)
    offer = table["knowledge_to_ground_in"]
    assert offer("gone")["choices"] == [OWN_KNOWLEDGE] and offer("gone")["value"] == OWN_KNOWLEDGE
    article = Passage("Tracking", "Orders ship with a code.", "kb.md")
    KnowledgeShelf().add("articles", [article], ["kb.md"])
    assert offer(OWN_KNOWLEDGE)["choices"] == [OWN_KNOWLEDGE, "articles", "articles@v1"]
    assert offer("articles")["value"] == "articles"
    put_adapter(varied_dir, "tuned")  # trained beside no knowledge: ungrounded by its own
    args = (["tuned"], "assets/demo_support.jsonl", 2, 8, 4, False, "intent", 0, "on")
    said = table["on_run"](*args, "articles")
    rows = said[5]["value"]  # the "with and without grounding" table
    assert said[5]["visible"] is True and set(rows["grounding"]) == {"articles v1"}
    assert set(rows["model"]) == {"base", "tuned"}
    gone = table["on_run"](*args, "faq")
    assert gone[0].startswith("⚠️ no knowledge base named 'faq'"), gone[0]
    # a version pinned, as an alias may serve it (the aliases' sentence says to pick it here)
    KnowledgeShelf().add("articles", [Passage("Tracking", "Orders ship in a day.", "kb.md")], [])
    assert offer("articles")["choices"][-2:] == ["articles@v1", "articles@v2"]
    said = table["on_run"](*args, "articles@v1")
    assert set(said[5]["value"]["grounding"]) == {"articles v1"}


def test_the_evaluation_answers_on_the_engine_the_app_serves_with(home, varied_dir, monkeypatch):
    """An app started with --engine pytorch (TUNEDESK_ENGINE) serves Chat and /v1 from PyTorch:
    the gate must judge PyTorch's answers, not llama-server's (auto's, where it is built and
    the adapters convert; this tiny model's answers come from PyTorch either way, so the engine
    asked for is read off the real call)."""
    import ui.tabs.evaluate as tab

    asked = []

    def evaluate(*args, **kwargs):
        asked.append(kwargs["engine"])
        return real(*args, **kwargs)

    real = tab.evaluate
    monkeypatch.setattr(tab, "evaluate", evaluate)
    table = handlers(varied_dir)
    put_adapter(varied_dir, "tuned")
    engines = table["engine"].serving
    before, engines.choice = engines.choice, "pytorch"
    try:
        said = table["on_run"](["tuned"], "assets/demo_support.jsonl", 2, 8, 4, False, "", 0)
    finally:
        engines.choice = before
    assert asked == ["pytorch"] and said[-1].settings["engine"]["name"] == "pytorch"


def test_a_negative_rows_per_slice_gets_the_boxs_own_sentence(home, varied_dir):
    """What Run evaluation sends goes through the box's preprocess first: a minimum there refused
    -3 with Gradio's own "Value -3 is less than minimum value 0." and a bare "Error"."""
    table = handlers(varied_dir)
    put_adapter(varied_dir, "tuned")
    sent = table["blocks"]["eval-rows-per-slice"].preprocess(-3)
    said = table["on_run"](["tuned"], "assets/demo_support.jsonl", 2, 8, 4, False, "intent", sent)
    assert said[0] == "⚠️ Rows per slice must be 0 (no cap) or a whole number, got -3", said[0]


def test_a_dataset_path_pasted_in_quotes_is_evaluated(home, varied_dir):
    """It said 'dataset file "assets/demo_support.jsonl" does not exist'."""
    table = handlers(varied_dir)
    put_adapter(varied_dir, "tuned")
    quoted = '"assets/demo_support.jsonl"'
    said = table["on_run"](["tuned"], quoted, 2, 8, 4, False, "", 0)[0]
    assert said.startswith("Scored 2 rows"), said
