"""`python -m finetune train` holds a claim while it trains, so a background llama.cpp build
waits (core/llama_cpp/build_pause.py), and its log and progress say so while one is building."""

from __future__ import annotations

import fcntl
import json
import os

from core.llama_cpp import build_pause
from finetune.__main__ import main


def test_a_run_holds_its_claim_while_it_trains_and_says_the_build_waits(
    tiny_llama_dir, home, tmp_path, monkeypatch, capsys
):
    llama = tmp_path / "llama.cpp"
    llama.mkdir()
    (llama / "build.log").write_text("[ 42%] Building CXX object\n")
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(llama))
    import finetune.train

    real_train, seen = finetune.train.train, []

    def train(*args, **kwargs):
        seen.append(build_pause.live_claims(llama))  # what the build's pauser sees meanwhile
        return real_train(*args, **kwargs)

    monkeypatch.setattr(finetune.train, "train", train)
    events = tmp_path / "events.jsonl"
    with open(llama / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build is running
        code = main(
            ["train", "--model", str(tiny_llama_dir), "--data", "assets/demo_support.jsonl"]
            + ["--max-steps", "2", "--eval-every", "0", "--events", str(events), "--quiet"]
        )
    assert code == 0
    assert seen == [[os.getpid()]]
    assert build_pause.live_claims(llama) == []  # gone with the run
    said = "llama.cpp's background build (42% done) waits while this run trains"
    assert said in capsys.readouterr().err
    statuses = [
        e for e in map(json.loads, events.read_text().splitlines()) if e["type"] == "status"
    ]
    assert said in statuses[0]["message"]


def test_no_build_no_word_of_one(tiny_llama_dir, home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path / "llama.cpp"))
    code = main(
        ["train", "--model", str(tiny_llama_dir), "--data", "assets/demo_support.jsonl"]
        + ["--max-steps", "1", "--eval-every", "0", "--quiet"]
    )
    assert code == 0 and "background build" not in capsys.readouterr().err
