"""Evaluation answered by llama.cpp's llama-server (as it serves) or by PyTorch: the answers are
llama-server's own, the report names the engine, ``auto`` falls back to PyTorch with a sentence.

A 2-layer llama with the default model's tokenizer (llama.cpp converts it) and one seeded LoRA.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_run import llama_or_skip, tiny_realtok_model
from serve_helpers import put_adapters

from adapters.shelf.store import Shelf
from core.llama_cpp import one_shot, process
from eval.__main__ import main
from eval.answers import decode, generate_kwargs
from eval.engines import open_answerer
from eval.run import evaluate
from eval.scoring_rows import select_rows
from inference.generate import GenerationSettings
from inference.session import ModelSession

ROWS, NEW_TOKENS = 6, 12
SETTINGS = GenerationSettings(max_new_tokens=NEW_TOKENS)


@pytest.fixture(scope="module")
def setup(default_model_dir, tmp_path_factory):
    """A home with the tiny model's adapter ``a`` on its shelf, and a support dataset."""
    llama_or_skip()
    model = tiny_realtok_model(default_model_dir.path, tmp_path_factory.mktemp("realtok"))
    home = tmp_path_factory.mktemp("eval-engines-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNEDESK_HOME", str(home))
        Shelf()
        put_adapters(home, model, names=("a",))
    data = home / "support.jsonl"
    rows = [
        {
            "prompt": f"where is my order {i}? it is late",
            "intent": "track_order" if i % 2 else "refund",
            "response": f"Your order {i} ships soon; track it in your account.",
        }
        for i in range(ROWS)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"model": model, "home": home, "data": data}


@pytest.fixture
def session(setup, monkeypatch):
    monkeypatch.setenv("TUNEDESK_HOME", str(setup["home"]))
    return ModelSession(str(setup["model"]), dtype="float32")


@pytest.fixture(scope="module")
def llama_report(setup):
    """One evaluation answered by llama.cpp, as the app's Chat serves (the default precision)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNEDESK_HOME", str(setup["home"]))
        session = ModelSession(str(setup["model"]), dtype="float32")
        report = evaluate(
            session,
            ["a"],
            str(setup["data"]),
            max_samples=ROWS,
            settings=SETTINGS,
            golden=None,
            use_validation_split=False,
            engine="llama.cpp",
        )
        return {"report": report, "session": session}


def test_llama_answers_are_llama_servers_own(setup, llama_report):
    session, report = llama_report["session"], llama_report["report"]
    rows = select_rows(session.tokenizer, {}, str(setup["data"]), ROWS, False, None)
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf

    base = ensure_base_gguf(session.resolved, "q8_0", home=setup["home"])
    lora = ensure_lora_gguf("a", home=setup["home"])
    stop = set(generate_kwargs(session, SETTINGS)["eos_token_id"])
    with process.LlamaServerProcess(
        llama_or_skip(),
        base,
        [lora],
        slots=1,
        ctx_per_slot=512,
        threads=2,
        log=setup["home"] / "own.log",
    ) as server:
        for sample, ids in zip(report.samples, rows.prompt_ids, strict=True):
            for label, lora_id in (("base", None), ("a", 0)):
                tokens, _ = one_shot.greedy(server, ids, NEW_TOKENS, lora=lora_id)
                assert sample["answers"][label] == decode(session, tokens, stop).text
    assert any(s["answers"]["a"] != s["answers"]["base"] for s in report.samples)


def test_the_report_names_the_engine_that_answered(llama_report):
    report = llama_report["report"]
    engine = report.settings["engine"]
    assert engine["name"] == "llama.cpp"
    assert engine["label"].startswith("llama.cpp")  # "llama.cpp q8_0", on AMX maybe ", --no-repack"
    summary = (Path(report.folder) / "summary.md").read_text()
    assert f"answered by {engine['label']}" in summary
    saved = json.loads((Path(report.folder) / "report.json").read_text())
    assert saved["settings"]["engine"]["name"] == "llama.cpp"
    assert report.timings["engine_start_seconds"] > 0


def test_auto_falls_back_to_pytorch_with_a_sentence(setup, session, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path / "no-llama"))
    monkeypatch.delenv("TUNEDESK_LLAMA_SERVER", raising=False)
    report = evaluate(
        session,
        ["a"],
        str(setup["data"]),
        max_samples=ROWS,
        settings=SETTINGS,
        golden=None,
        use_validation_split=False,
        save=False,
        engine="auto",
    )
    engine = report.settings["engine"]
    assert engine["name"] == "pytorch"
    assert engine["note"].startswith("PyTorch answered: llama.cpp could not (")
    pytorch = evaluate(
        session,
        ["a"],
        str(setup["data"]),
        max_samples=ROWS,
        settings=SETTINGS,
        golden=None,
        use_validation_split=False,
        save=False,
        engine="pytorch",
    )
    assert [s["answers"] for s in report.samples] == [s["answers"] for s in pytorch.samples]
    assert pytorch.settings["engine"]["note"] == ""


def test_llama_cpp_asked_for_where_absent_is_refused_with_why(session, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path / "no-llama"))
    monkeypatch.delenv("TUNEDESK_LLAMA_SERVER", raising=False)
    session.load()
    with pytest.raises(ValueError, match="llama.cpp cannot answer this evaluation: .+"):
        open_answerer(session, "llama.cpp", ["a"], 4)


def test_an_unknown_engine_is_refused_before_the_model_loads(setup, session):
    with pytest.raises(ValueError, match="engine must be one of auto, llama.cpp, pytorch"):
        evaluate(session, ["a"], str(setup["data"]), engine="vllm")
    assert session.status()["state"] != "ready"


def test_cli_prints_the_engine(setup, monkeypatch, capsys):
    monkeypatch.setenv("TUNEDESK_HOME", str(setup["home"]))
    code = main(
        [
            "--adapter",
            "a",
            "--data",
            str(setup["data"]),
            "--max-samples",
            "2",
            "--max-new-tokens",
            "4",
            "--no-golden",
            "--first-rows",
            "--quiet",
            "--engine",
            "pytorch",
        ]
    )
    assert code == 0
    assert "answered by pytorch " in capsys.readouterr().out  # its dtype is the session's choice
