"""`python -m bench answer-beside-build`: its flags refused in words, and a run end to end beside
a stand-in build: a child process answers as Chat answers on PyTorch, in every mode, and the
build's pauser stops the build before the answers of the ``stopped`` mode."""

from __future__ import annotations

import json

import pytest

from bench import answer_beside_build as bench

STAND_IN = "sh -c \"echo '[ 42%] Building CXX object'; while :; do sleep 0.05; done\""


def test_bad_flags_are_refused_in_words(capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["--rounds", "0"])
    assert info.value.code == 2 and "--rounds and --tokens must be 1 or more" in (
        capsys.readouterr().err
    )


def test_each_mode_times_answers_of_the_asked_length(tiny_llama_dir, tmp_path, monkeypatch):
    seen = {}
    real_run = bench.run

    def run(work, *args):
        found = real_run(work, *args)
        seen["log"] = (work / "build.log").read_text()
        return found

    monkeypatch.setattr(bench, "run", run)
    out = tmp_path / "rows.json"
    argv = ["--model", str(tiny_llama_dir), "--rounds", "1", "--tokens", "6", "--lead", "0.5"]
    assert bench.main([*argv, "--build", STAND_IN, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [row["mode"] for row in result["rows"]] == list(bench.MODES)
    for row in result["rows"]:
        assert row["answer_s"] > 0 and abs(6 / row["tok_s"] - row["answer_s"]) < 0.002
    assert result["build"] == "42% -> 42%"
    # stopped before each of the two rounds' stopped answers, running again for the others
    assert seen["log"].count("build paused") == 2 == seen["log"].count("build goes on")
