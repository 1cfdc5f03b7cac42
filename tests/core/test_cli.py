"""The one CLI dispatcher: a table row per command module, either kind of module, errors as
one sentence and exit code 2."""

from __future__ import annotations

import sys
import types

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
    return {"hello": ("fake_parsed", "say hi"), "own": ("fake_own", "its own parser"),
            "bad": ("fake_bad", "fails")}


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


def test_every_package_table_names_modules_that_exist():
    import importlib

    for package in ("adapters", "finetune", "bench"):
        commands = importlib.import_module(f"{package}.__main__").COMMANDS
        for module, _ in commands.values():
            loaded = importlib.import_module(module)
            assert hasattr(loaded, "main"), module
