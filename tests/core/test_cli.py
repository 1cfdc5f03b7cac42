"""The one CLI dispatcher: a table row per command module, either kind of module, errors as
one sentence and exit code 2."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from core import cli


@pytest.fixture
def table(monkeypatch):
    parsed = types.ModuleType("fake_parsed")  # add_arguments + main(args)
    parsed.add_arguments = lambda p: p.add_argument("--times", type=int, default=1)
    parsed.main = lambda args: print("hi " * args.times) or 0
    own = types.ModuleType("fake_own")  # main(argv): parses its own line
    own.main = lambda argv: print("argv", argv) or 3

    def broken(args):
        raise ValueError("the file 'x.csv' has no 'response' column")

    bad = types.ModuleType("fake_bad")
    bad.add_arguments, bad.main = (lambda p: None), broken
    for module in (parsed, own, bad):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return {
        "hello": ("fake_parsed", "say hi"),
        "own": ("fake_own", "its own parser"),
        "bad": ("fake_bad", "fails"),
    }


def test_commands_run_with_their_arguments_and_exit_codes(table, capsys):
    assert cli.run("prog", "d", table, ["hello", "--times", "2"]) == 0
    assert capsys.readouterr().out.strip() == "hi hi"
    assert cli.run("prog", "d", table, ["own", "--anything", "goes"]) == 3
    assert "argv ['--anything', 'goes']" in capsys.readouterr().out


def test_bad_input_is_one_sentence_and_exit_2(table, capsys):
    assert cli.run("prog", "d", table, ["bad"]) == 2
    assert capsys.readouterr().err == "error: the file 'x.csv' has no 'response' column\n"
    with pytest.raises(SystemExit) as stop:
        cli.run("prog", "d", table, ["nope"])
    assert stop.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_a_flag_the_command_does_not_have_is_refused_with_its_usage(table, capsys):
    """It was refused under the program's usage ('prog [-h] {hello,own,bad} ...'), as if the
    command were what was wrong."""
    with pytest.raises(SystemExit) as stop:
        cli.run("prog", "d", table, ["hello", "--since", "2026-02-03"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("usage: prog hello [-h] [--times TIMES]\n")
    assert err.endswith("prog hello: error: unrecognized arguments: --since 2026-02-03\n")


def test_every_package_table_names_modules_that_exist():
    import importlib

    for package in ("adapters", "finetune", "bench"):
        commands = importlib.import_module(f"{package}.__main__").COMMANDS
        for module, _ in commands.values():
            loaded = importlib.import_module(module)
            assert hasattr(loaded, "main"), module


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("CUDA error: an illegal memory access\nmore"),
        OSError(28, "No space left on device"),
        KeyError("rows"),
    ],
)
def test_an_internal_error_is_one_line_exit_1_and_its_trace_in_a_log(
    home, capsys, monkeypatch, failure
):
    def boom(args):
        raise failure

    module = types.ModuleType("fake_boom")
    module.add_arguments, module.main = (lambda p: None), boom
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert cli.run("python -m finetune", "d", {"boom": ("fake_boom", "fails")}, ["boom"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: internal error ({type(failure).__name__}"
    )
    log = home / "logs" / err.split("the traceback is in ")[1].strip().split("/")[-1]
    assert log.parent == home / "logs" and log.name.startswith("finetune-")
    assert "Traceback (most recent call last)" in log.read_text() and "in boom" in log.read_text()


def test_a_missing_file_named_is_bad_input_not_an_internal_error(capsys, monkeypatch):
    def missing(args):
        Path("/nonexistent/data.jsonl").read_text()

    module = types.ModuleType("fake_missing")
    module.add_arguments, module.main = (lambda p: None), missing
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert cli.run("prog", "d", {"m": ("fake_missing", "fails")}, ["m"]) == 2
    assert capsys.readouterr().err.startswith("error: [Errno 2] No such file or directory")


def test_eval_and_serve_exit_1_on_an_internal_error_and_2_on_bad_input(home, capsys, monkeypatch):
    import eval.__main__ as eval_cli
    import serve.__main__ as serve_cli

    monkeypatch.setenv("TUNEDESK_EXPOSED", "0")  # serve's main records it: restored after the test

    def crash(*args, **kwargs):
        raise RuntimeError("library state broken")

    monkeypatch.setattr(eval_cli, "run", crash)
    assert eval_cli.main(["--adapter", "a", "--data", "assets/demo_support.jsonl"]) == 1
    monkeypatch.setattr(serve_cli, "build", crash)
    monkeypatch.setattr(serve_cli, "set_answer_bound", lambda *a: None)
    assert serve_cli.main(["--port", "1"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(
        "internal error (RuntimeError: library state broken)" in ln for ln in lines
    )
    assert len(list((home / "logs").glob("*.log"))) == 2
    monkeypatch.setenv("TUNEDESK_CHAT_KEYS", "web:short")
    assert serve_cli.main(["--port", "1"]) == 2  # a malformed key is bad input


def help_of(run, argv, capsys, monkeypatch) -> str:
    """What ``--help`` prints, on one line (no wrapping: every default reads whole)."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as stop:
        run(argv)
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_train_help_shows_each_default_from_the_config(capsys, monkeypatch):
    from finetune.__main__ import main
    from finetune.config import RunConfig
    from finetune.preference_defaults import METHOD_DEFAULTS

    said, cfg = help_of(main, ["train", "--help"], capsys, monkeypatch), RunConfig()
    orpo = METHOD_DEFAULTS["orpo"]
    for wanted in (
        f"peak learning rate (default: sft {cfg.train.learning_rate:g}, ",
        f", orpo {orpo.learning_rate:g})",
        f"passes over the data (default: sft {cfg.train.epochs:g}, ",
        f"(8 on the CPU) (default: sft {cfg.train.batch_size}, ",
        f"with the figures (default: {cfg.train.time_budget_s:g})",  # --time-budget
        f"dataset file, folder or Hub id (default: {cfg.data.path})",
        f"'default' (default: {cfg.model.name})",
        f"LoRA rank (default: {cfg.lora.r})",
        f"(default: dpo {METHOD_DEFAULTS['dpo'].beta:g}, cpo ",
    ):
        assert wanted in said, wanted
    assert "(default: None)" not in said and "(default: False)" not in said


def test_every_cli_lists_its_commands_and_shows_its_flags_defaults(capsys, monkeypatch):
    import argparse
    import importlib

    from eval.__main__ import build_parser as eval_parser
    from eval.__main__ import main as eval_main
    from eval.judge_check import build_parser as judge_parser
    from serve.__main__ import build_parser as serve_parser

    parsers = {"eval": eval_parser(), "eval judge-check": judge_parser(), "serve": serve_parser()}
    for package in ("finetune", "adapters", "feedback", "bench", "knowledge"):
        main = importlib.import_module(f"{package}.__main__")
        said = help_of(main.main, ["--help"], capsys, monkeypatch)
        assert all(name in said for name in main.COMMANDS), package
        for name, (module_name, _) in main.COMMANDS.items():
            module = importlib.import_module(module_name)
            if hasattr(module, "add_arguments"):
                parsers[f"{package} {name}"] = parser = argparse.ArgumentParser()
                module.add_arguments(parser)
            else:  # its own parser: it shows its defaults through the same formatter
                assert "(default: " in help_of(module.main, ["--help"], capsys, monkeypatch), name
    for name, parser in parsers.items():
        formatter = cli.DefaultsFormatter(name)
        for action in parser._actions:
            if action.option_strings and action.nargs != 0 and action.default not in (None, [], ""):
                assert "default" in formatter._get_help_string(action), (name, action.dest)
    said = help_of(eval_main, ["--help"], capsys, monkeypatch)
    assert "judge-check: grade the review queue's human-rated answers" in said
    assert "--port PORT port to listen on (default: 8000)" in help_of(
        lambda argv: serve_parser().parse_args(argv), ["--help"], capsys, monkeypatch
    )


def test_a_listing_piped_into_head_ends_quietly(tmp_path):
    """``python -m knowledge list ... | head -1``: the reader goes away; no internal error, no
    log, as for ls or grep."""
    import subprocess

    script = (
        "import sys; from core import cli\n"
        "def many():\n"
        "    for i in range(200_000):\n"
        "        print('passage', i)\n"
        "sys.exit(cli.guarded(many, 'python -m knowledge list'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        f'{sys.executable} -c "$SCRIPT" | head -1; echo "exit ${{PIPESTATUS[0]}}"',
        shell=True,
        executable="/bin/bash",
        cwd=root,
        env={"SCRIPT": script, "TUNEDESK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.splitlines() == ["passage 0", "exit 141"], done.stdout
    assert done.stderr == "" and not (tmp_path / "logs").exists()
