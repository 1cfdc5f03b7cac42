"""`python -m knowledge`: the table of commands, their exit codes and sentences, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def files(tmp_path):
    md = tmp_path / "help.md"
    md.write_text(
        "# Refunds\nRefunds are paid within 30 days.\n# Shipping\nParcels take two to five days.\n"
    )
    csv = tmp_path / "faq.csv"
    csv.write_text("question,answer\nhow do I reset my password,Use the forgot password link.\n")
    return md, csv


def test_import_list_search_delete(home, files, capsys):
    md, csv = files
    assert main(["import", str(md), "--name", "kb"]) == 0
    assert "into kb v1" in capsys.readouterr().out
    assert main(["import", str(csv), "--name", "kb"]) == 0
    assert "kb v2 (3 passages in all" in capsys.readouterr().out
    assert main(["list", "kb", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["version"], r["passages"]) for r in rows] == [("v1", 2), ("v2", 3)]
    assert main(["list", "kb", "--version", "v1", "--json"]) == 0
    assert [json.loads(line)["title"] for line in capsys.readouterr().out.splitlines()] == [
        "Refunds",
        "Shipping",
    ]
    assert main(["search", "forgot my password", "--name", "kb", "-k", "1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["version"], found["passages"][0]["question"]) == (
        "v2",
        "how do I reset my password",
    )
    assert main(["delete", "kb", "--version", "v1", "--yes"]) == 0
    assert capsys.readouterr().out.strip() == "Deleted kb v1."
    assert main(["list", "kb", "--json"]) == 0
    assert [json.loads(line)["version"] for line in capsys.readouterr().out.splitlines()] == ["v2"]


def test_list_lines_up_its_columns_and_cuts_long_text_with_an_ellipsis(home, tmp_path, capsys):
    long_title = "How to change the delivery address of an order that has already shipped"
    md = tmp_path / "help.md"
    md.write_text(f"# Refunds\nPaid within 30 days.\n# {long_title}\nWrite to us first.\n")
    assert main(["import", str(md), "--name", "help-center-articles"]) == 0
    assert main(["import", str(md), "--name", "kb"]) == 0
    capsys.readouterr()

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["name", "version", "passages"],
        ["help-center-articles", "v1", "2"],
        ["kb", "v1", "2"],
    ]
    for column in ("version", "created", "fingerprint", "sources"):  # each starts where its head
        at = lines[0].index(column)
        assert all(line[at - 2 : at] == "  " and line[at] != " " for line in lines[1:])
    at = lines[0].index("passages") + len("passages")  # numbers end where their head does
    assert all(line[at - 1] == "2" and line[at] == " " for line in lines[1:])

    assert main(["list", "kb", "--version", "v1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cut = long_title[:47] + "…"
    assert lines[0].split() == ["id", "kind", "intent", "title", "source"]
    title, source = lines[0].index("title"), lines[0].index("source")
    assert [line[title:source].rstrip() for line in lines[1:]] == ["Refunds", cut]
    assert len(cut) + 2 == source - title  # the column is as wide as its widest cell
    assert [line[: lines[0].index("kind")] for line in lines] == ["id  ", " 1  ", " 2  "]
    assert [line[source:] for line in lines[1:]] == [
        "help.md#Refunds",
        "help.md#" + long_title[:39] + "…",
    ]
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["search", "refund", "--name", "nope"], "no knowledge base named 'nope'"),
        (["search", "  ", "--name", "kb"], "the query is empty"),
        (["search", "refund", "--name", "kb", "-k", "0"], "k must be a whole number from 1 to 20"),
        (["search", "refund", "--name", "kb", "--version", "v9"], "kb has no version 'v9'"),
        (["delete", "kb"], "Deleting is for good"),
        # a name typed where a file goes, and a folder, said "unknown file type '(none)'"
        (["import", "kb"], "kb does not exist; a knowledge base's name goes after --name"),
        (["import", "tests"], "tests is a folder; name the files in it (tests/*.md, ...)"),
        (["list", "--version", "v1"], "--version needs a knowledge base name"),
        (["list", "kb", "--version", "latest", "--limit", "0"], "--limit must be from 1 to"),
        (["list", "kb", "--version", "latest", "--limit", "-1"], "--limit must be from 1 to"),
        (["list", "kb", "--version", "latest", "--limit", "9" * 20], "--limit must be from 1 to"),
    ],
)
def test_bad_input_exits_2_with_one_sentence(home, files, capsys, argv, said):
    assert main(["import", str(files[0]), "--name", "kb"]) == 0
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
    assert main(["list", "kb", "--json"]) == 0  # nothing was lost
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_search_without_name_takes_the_only_knowledge_base_else_names_them(home, files, capsys):
    """With no --name, 'articles' is searched; with none of that name, the only knowledge base
    is, and among several the refusal names them and --name (it said only 'no knowledge base
    named 'articles'')."""
    assert main(["import", str(files[0]), "--name", "kb"]) == 0
    capsys.readouterr()
    assert main(["search", "refund"]) == 0
    assert capsys.readouterr().out.startswith("kb v1: 1 passage(s)")
    assert main(["import", str(files[1]), "--name", "faq"]) == 0
    capsys.readouterr()
    assert main(["search", "refund"]) == 2
    assert capsys.readouterr().err == (
        "error: no knowledge base is named 'articles', the one searched without --name; "
        "pass --name with one of: faq, kb\n"
    )
    assert main(["import", str(files[1])]) == 0  # into 'articles'
    capsys.readouterr()
    assert main(["search", "password"]) == 0
    assert capsys.readouterr().out.startswith("articles v1: 1 passage(s)")


def test_a_bad_file_among_good_ones_imports_nothing(home, files, tmp_path, capsys):
    binary = tmp_path / "manual.txt"
    binary.write_bytes(b"\x00\x01\x02")
    assert main(["import", str(files[0]), str(binary), "--name", "kb"]) == 2
    assert "manual.txt is not text" in capsys.readouterr().err
    assert not (home / "knowledge" / "kb").exists()


def test_help_lists_every_command_and_defaults_in_a_real_process(home):
    run = subprocess.run(
        [sys.executable, "-m", "knowledge", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and all(name in run.stdout for name in COMMANDS)
    run = subprocess.run(
        [sys.executable, "-m", "knowledge", "search", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "(default: articles, or the only knowledge base" in " ".join(run.stdout.split())
    assert "(default: 3)" in run.stdout
    run = subprocess.run(
        [sys.executable, "-m", "knowledge", "frobnicate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "invalid choice" in run.stderr


def test_import_says_how_many_rows_were_skipped_and_why(home, tmp_path, capsys):
    faq = tmp_path / "faq.csv"
    faq.write_text("question,answer\nOne?,Yes.\nTwo?,\nThree?,Sure.\nFour?,\n")
    assert main(["import", str(faq), "--name", "kb"]) == 0
    out = capsys.readouterr().out
    assert "Imported 2 passage(s) from 1 file(s) into kb v1" in out
    assert "faq.csv: 2 rows skipped: empty answer (lines 3, 5)." in out
    assert main(["import", str(faq), "--name", "kb"]) == 0  # nothing new: still said
    out = capsys.readouterr().out
    assert "no new version made" in out and "2 rows skipped: empty answer" in out
