"""`python -m finetune runs`: the supervised runs, or a sentence when there are none."""

from __future__ import annotations

from finetune.__main__ import main


def test_no_supervised_run_is_said_not_left_blank(home, capsys):
    (home / "runs" / "20261207-120959").mkdir(parents=True)  # a CLI run's folder: no status
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No run started from the Train tab in ")
    assert "python -m finetune train" in out and out.count("\n") == 1
