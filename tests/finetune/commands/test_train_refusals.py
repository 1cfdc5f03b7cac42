"""`python -m finetune train` refuses settings it cannot carry out in a sentence, exit code 2,
before anything loads, and makes no run folder: `--resume` without the run it continues (or
naming a run folder there is not), a run folder or output folder that is a file, an adapter to
start from for a supervised run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--resume"], "resume continues a run's folder: name it (--run-dir"),
        (["--run-dir", "{file}"], "is a file; name a folder"),
        (["--output-dir", "{file}"], "is a file; name a folder to copy into"),
        (["--from-adapter", "anything"], "--from-adapter is for --method dpo, cpo or orpo"),
        # it said "name the adapter to start from", not which flag names it
        (
            ["--method", "dpo"],
            "dpo trains an adapter further: name the adapter to start from (--from-adapter)",
        ),
        # a mistyped run folder trained a new run from step 0, under a made-up name
        (["--resume", "--run-dir", "{missing}"], "there is no run folder"),
        # it trained, then failed to copy the adapter onto itself: "internal error", exit 1
        (["--output-dir", "{shelf}"], "is the adapter shelf or in it"),
        (["--output-dir", "{shelf}/an-adapter"], "is the adapter shelf or in it"),
        # "[Errno 2] No such file or directory: '...'" and "... [Errno 21] Is a directory"
        (["--config", "{missing}.yaml"], "no-such-run.yaml does not exist"),
        (["--config", "{folder}"], "is a folder; name a JSON or YAML file"),
    ],
)
def test_settings_it_cannot_carry_out_are_refused_in_a_sentence(
    tiny_llama_dir, home, tmp_path, flags, said
):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    out = subprocess.run(
        [sys.executable, "-m", "finetune", "train", "--model", str(tiny_llama_dir)]
        + [
            flag.format(
                file=a_file,
                missing=tmp_path / "no-such-run",
                shelf=home / "adapters",
                folder=tmp_path,
            )
            for flag in flags
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert said in out.stderr and "Traceback" not in out.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    assert a_file.read_text() == "not a folder" and not (tmp_path / "no-such-run").exists()


@pytest.mark.parametrize(
    "rows, said",
    [
        ("first,second\nhi,there\n", "could not tell which columns hold the prompt and the "),
        ("prompt,response\n,\n", "none of the 1 rows is usable"),
    ],
)
def test_a_dataset_it_cannot_read_is_refused_before_the_model_resolves(
    tiny_llama_dir, home, tmp_path, rows, said
):
    """The data's refusal came after 'resolving base model ...' and 'loading and tokenizing the
    dataset' (and, for a model not converted yet, its conversion's progress bars)."""
    data = tmp_path / "rows.csv"
    data.write_text(rows)
    out = subprocess.run(
        [sys.executable, "-m", "finetune", "train", "--model", str(tiny_llama_dir)]
        + ["--data", str(data), "--max-steps", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and "resolving" not in out.stderr and "%|" not in out.stderr
    lines = out.stderr.splitlines()
    assert lines[0] == "error: the training settings cannot run here:" and len(lines) == 2
    assert lines[1].startswith("  - rows.csv: ") and said in lines[1]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
