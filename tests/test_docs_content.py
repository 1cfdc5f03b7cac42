"""Docs that say what is there: links reach their headings, architecture.md names the tree and
its import rules, the guide lists every variable, the FAQ links instead of repeating figures.

Every relative link of README.md and docs/*.md (the history included) must reach a file and,
with ``#anchor``, a heading of it, as GitHub names headings. docs/architecture.md's Layout
names only files that are there, and every package, its subpackages and the modules directly
in it (bench's one module per command aside); its table of who may import whom is
tests/test_layout.py's ``ALLOWED``. Every ``TUNEDESK_*`` variable the product reads has a row
in the guide's table of environment variables. docs/faq.md repeats no figure (a number in its
prose outside code: figures live in docs/benchmarks.md), and each answer links to where it is
said in full. The checkers run on made-up text first, so one that cannot fail would show.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_BLOCK = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)  # list items indent


def anchor_of(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (links and HTML tags reduced to their words)
    lower-cased, punctuation and symbols dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a markdown text: its headings' (a repeated one gets ``-1``, ``-2`` ...,
    as GitHub numbers them) and ``<a id="...">``; headings inside code blocks are not ones."""
    prose = CODE_BLOCK.sub("", text)
    found = set(re.findall(r'<a\s+(?:id|name)="([^"]+)"', prose))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M):
        anchor = anchor_of(heading)
        seen[anchor] = seen.get(anchor, -1) + 1
        found.add(anchor if seen[anchor] == 0 else f"{anchor}-{seen[anchor]}")
    return found


@cache
def _anchors_in(doc: Path) -> set[str]:
    return anchors(doc.read_text())


def broken_links(doc: Path) -> list[str]:
    """The relative links of a markdown document (code left out) whose file is not there, or
    whose ``#anchor`` no heading of that markdown file has."""
    prose = re.sub(r"`[^`\n]*`", "", CODE_BLOCK.sub("", doc.read_text()))
    targets = re.findall(r"\]\(([^)\s]+)", prose) + re.findall(r'(?:src|href)="([^"]+)"', prose)
    broken = []
    for target in targets:
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors_in(linked):
            broken.append(f"{target} (no heading with that anchor)")
    return broken


MODULE = re.compile(r"(?<![\w./-])([A-Za-z_][\w*]*\.py)\b")


UNLISTED_MODULES = {"bench"}  # one module per `python -m bench` command: the commands name them


def layout_entries(text: str) -> list[tuple[str, str]]:
    """Each name of the Layout block of docs/architecture.md as a path from the project root
    (``core/paths.py``, ``core/store/``), with its description: a name at column 0 is a
    top-level one, at column 2 one inside the last top-level package, deeper lines describe."""
    block = CODE_BLOCK.findall(text.split("\n## Layout", 1)[1])[0]
    entries: list[tuple[str, str]] = []
    package = ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        names, _, description = line.strip().partition("  ")
        if indent > 2 or not names:
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {line.strip()}")
            continue
        entries += [
            ((package if indent else "") + n.strip(), description) for n in names.split(",")
        ]
        if indent == 0:
            package = names if names.endswith("/") else ""
    return entries


def layout_problems(text: str, root: Path) -> list[str]:
    """What the Layout block gets wrong about the tree at ``root``: a name (or a ``x.py`` its
    description mentions, looked for under that name's folder, or at the root) that is not
    there, and a top-level package, subpackage or module directly in one that goes unnamed."""
    wrong, named = [], set()
    for path, description in layout_entries(text):
        found = sorted(root.glob(path.rstrip("/")))
        wrong += [] if found else [f"{path} is not there"]
        named |= {f.relative_to(root).as_posix() for f in found}
        folder = root / (path if path.endswith("/") else path.rpartition("/")[0])
        for module in MODULE.findall(description):
            found = sorted(folder.rglob(module)) or sorted(root.glob(module))
            wrong += [] if found else [f"{module} (said of {path}) is not there"]
            named |= {f.relative_to(root).as_posix() for f in found}
    for top in sorted(p.parent for p in root.glob("*/__init__.py")):
        inside = [top, *(p for p in sorted(top.iterdir()) if (p / "__init__.py").is_file())]
        if top.name not in UNLISTED_MODULES:
            inside += [p for p in sorted(top.glob("*.py")) if not p.name.startswith("__")]
        unnamed = [p.relative_to(root).as_posix() for p in inside]
        wrong += [f"{p} goes unnamed" for p in unnamed if p not in named]
    return wrong


ENV_VAR = re.compile(r"\bTUNEDESK_[A-Z0-9_]*[A-Z0-9]\b")


INTERNAL_VARS = {"TUNEDESK_EXPOSED"}  # set by the app for its own children, never by a user


def variables_read(root: Path) -> set[str]:
    """Every ``TUNEDESK_*`` name in the product's code (tests left out)."""
    packages = [p.parent for p in root.glob("*/__init__.py") if p.parent.name != "tests"]
    files = [root / "app.py", *(f for package in packages for f in package.rglob("*.py"))]
    return {v for f in files if f.is_file() for v in ENV_VAR.findall(f.read_text())}


def variables_in_table(guide: str) -> set[str]:
    """The variables the guide's "Environment variables" table has a row for."""
    section = guide.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {v for row in rows for v in ENV_VAR.findall(row)}


def figures_in(text: str) -> list[str]:
    """The words of a markdown text's prose that hold a digit (code and link targets left out)."""
    prose = re.sub(r"`[^`]+`", "", CODE_BLOCK.sub("", text))  # a span may break across lines
    prose = re.sub(r"\]\([^)\s]+\)", "]", prose)
    return [w for w in prose.split() if re.search(r"\d", w)]


def unlinked_answers(text: str) -> list[str]:
    """The ``###`` questions of a markdown text whose answer has no link."""
    sections = re.split(r"^### ", CODE_BLOCK.sub("", text), flags=re.M)[1:]
    return [s.splitlines()[0] for s in sections if not re.search(r"\]\([^)\s]+\)", s)]


def import_table(text: str) -> dict[str, set[str]]:
    """The "Who may import whom" table of docs/architecture.md: package -> the packages it may
    import (the names in backticks, remarks in parentheses left out)."""
    section = text.split("\n## Who may import whom\n", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            package = re.findall(r"`([^`]+)`", cells[0])[0]
            table[package] = set(re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cells[1])))
    return table


def allowed_in_layout_test() -> dict[str, set[str]]:
    """tests/test_layout.py's ``ALLOWED``, read without importing it."""
    tree = ast.parse((ROOT / "tests" / "test_layout.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ALLOWED":
            return ast.literal_eval(node.value)
    raise AssertionError("tests/test_layout.py has no ALLOWED")


def test_anchors_are_githubs_and_the_link_checker_finds_a_missing_file_and_anchor(tmp_path):
    assert anchor_of("Serving: TuneDesk's /v1 beside llama.cpp's own llama-server") == (
        "serving-tunedesks-v1-beside-llamacpps-own-llama-server"
    )
    assert anchor_of("The test suite (`make test`)") == "the-test-suite-make-test"
    assert anchor_of("Go [past](x.md) one <b>machine</b> →") == "go-past-one-machine-"
    (tmp_path / "other.md").write_text(
        "# Other\n\n## Keys and roles\n\n## Notes\n\n```\n## In code\n```\n\n## Notes\n"
    )
    (tmp_path / "doc.md").write_text(
        "# Doc\n\n## Here, now\n\n[a](other.md#keys-and-roles) [b](other.md#notes-1) "
        "[c](#here-now) [d](https://x.org/y#z) `[e](gone.md)`\n"
        "[f](gone.md) [g](other.md#in-code) [h](#nowhere) [i](other.md#notes-2)\n"
    )
    assert broken_links(tmp_path / "doc.md") == [
        "gone.md (no such file)",
        "other.md#in-code (no heading with that anchor)",
        "#nowhere (no heading with that anchor)",
        "other.md#notes-2 (no heading with that anchor)",
    ]


def test_the_layout_checker_finds_a_wrong_name_and_an_unnamed_module(tmp_path):
    for name in [
        "core/__init__.py",
        "core/paths.py",
        "core/hosts.py",
        "core/store/__init__.py",
        "core/store/db.py",
        "serve/__init__.py",
        "serve/flags.py",
        "app.py",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    text = (
        "# Architecture\n\n## Layout\n\n```\n"
        "app.py       the entry point\n"
        "core/        shared\n"
        "  paths.py, hashes.py   the home; hosts.py\n"
        "  store/     one database (db.py), migrations (migrate.py)\n"
        "serve/       many clients\n"
        "  flags.py   the flags app.py and\n"
        "             python -m serve share (keys.py)\n"
        "```\n"
    )
    assert [p for p, _ in layout_entries(text)] == [
        "app.py",
        "core/",
        "core/paths.py",
        "core/hashes.py",
        "core/store/",
        "serve/",
        "serve/flags.py",
    ]
    assert layout_problems(text, tmp_path) == [
        "core/hashes.py is not there",
        "migrate.py (said of core/store/) is not there",
        "keys.py (said of serve/flags.py) is not there",
    ]
    (tmp_path / "serve" / "keys.py").write_text("")
    (tmp_path / "serve" / "rate_limit.py").write_text("")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "gateway.py").write_text("")
    assert layout_problems(text, tmp_path)[-3:] == [
        "migrate.py (said of core/store/) is not there",
        "bench goes unnamed",
        "serve/rate_limit.py goes unnamed",
    ]


def test_the_architecture_layout_names_what_is_there_and_all_of_it():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert len(layout_entries(text)) > 80
    assert layout_problems(text, ROOT) == []


def test_the_variable_finders_read_code_and_the_table_rows_only(tmp_path):
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "__init__.py").write_text('X = "TUNEDESK_PORT"  # TUNEDESK_\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text('os.environ["TUNEDESK_TEST_ONLY"]')
    (tmp_path / "app.py").write_text("f'{TUNEDESK_HOME_DIR}'")
    assert variables_read(tmp_path) == {"TUNEDESK_PORT", "TUNEDESK_HOME_DIR"}
    guide = (
        "# Guide\n\n## Environment variables\n\n| variable | meaning |\n|---|---|\n"
        "| `TUNEDESK_PORT`, `TUNEDESK_HOST` | with `TUNEDESK_AUTH` |\n\n## Tests\n\n"
        "| `TUNEDESK_LATER` | x |\n"
    )
    assert variables_in_table(guide) == {"TUNEDESK_PORT", "TUNEDESK_HOST"}


def test_every_variable_the_product_reads_has_a_row_in_the_guides_table():
    read = variables_read(ROOT) - INTERNAL_VARS
    assert len(read) > 30 and "TUNEDESK_HOME" in read
    missing = sorted(read - variables_in_table((ROOT / "docs" / "guide.md").read_text()))
    assert missing == [], f"read by the code, no row in guide.md's Environment variables: {missing}"


def test_the_faq_checkers_find_a_figure_in_prose_and_an_answer_with_no_link():
    text = (
        "# Q\n\n### How fast?\n\nAbout 4.5 times as fast (`--time-budget 30m`,\n"
        "[figures](benchmarks.md#v2-speed)).\n\n```bash\nmake run PORT=8080\n```\n\n"
        "### Where?\n\nIn the home folder, v2 and on.\n"
    )
    assert figures_in(text) == ["4.5", "v2"]
    assert unlinked_answers(text) == ["Where?"]


def test_the_faq_repeats_no_figure_and_links_every_answer():
    text = (ROOT / "docs" / "faq.md").read_text()
    assert text.count("\n### ") >= 10
    assert figures_in(text) == [], "figures belong in docs/benchmarks.md, linked from the FAQ"
    assert unlinked_answers(text) == []


def test_the_import_table_reader_keeps_names_and_drops_remarks():
    text = (
        "# A\n\n## Who may import whom\n\n| package | may import |\n|---|---|\n"
        "| `core` | `core` |\n| `app` (`app.py`) | `core`, `serve` (flags of `python -m serve`), "
        "`ui` |\n\nEvery import goes `up`.\n\n## Layout\n\n| `x` | `y` |\n"
    )
    assert import_table(text) == {"core": {"core"}, "app": {"core", "serve", "ui"}}


def test_the_architecture_import_table_is_the_layout_tests():
    table = import_table((ROOT / "docs" / "architecture.md").read_text())
    assert table == allowed_in_layout_test()


def test_every_relative_link_and_anchor_of_the_docs_resolves():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = {d.relative_to(ROOT).as_posix(): b for d in docs if (b := broken_links(d))}
    assert broken == {}, broken
