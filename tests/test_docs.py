"""Docs that cannot drift: every command the README and docs/ name parses, every doc is linked.

Each ``python -m <package> ...`` of this project named in README.md or docs/*.md (code blocks
and inline code; docs/benchmarks-log.md is history and left out) is run with ``--help`` along
its subcommand path: the run must exit 0, and every ``--flag`` the doc gives must appear in that
subcommand's help. Each ``make <target>`` must be a rule of the Makefile. Every file in docs/
(pictures aside) must be linked from README.md or docs/guide.md, so none is left unfound, and
every relative link of README.md and docs/*.md (the history included) must reach a file and,
with ``#anchor``, a heading of it. docs/architecture.md's Layout names only files that are
there, and every package, its subpackages and the modules directly in it (bench's one module
per command aside). docs/faq.md repeats no figure (a number in its prose outside code: figures
live in docs/benchmarks.md), and each answer links to where it is said in full. Every
``TUNEDESK_*`` variable the product reads has a row in the guide's
table of environment variables. The checkers run on made-up text first, so one that cannot fail
would show.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import shlex
import subprocess
import sys
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = {"benchmarks-log.md"}  # dated records of what ran then; its old spellings stay
CODE_BLOCK = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)  # list items indent
INLINE = re.compile(r"`([^`]+)`")
PYTHON_M = re.compile(r"(?:^|[\s(])(?:\S*/)?python3?\s+(?:-m\s+)?(.+)")
MAKE = re.compile(r"(?:^|[\s(])make\s+(.+)")
SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*")
FLAG = re.compile(r"--[A-Za-z][\w-]*")


def documents() -> list[Path]:
    """README.md and docs/*.md, the history log left out."""
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in HISTORY)
    return [ROOT / "README.md", *docs]


def snippets(text: str) -> list[tuple[str, bool]]:
    """Shell text of a document: each code-block line (``\\`` continuations joined) and each
    inline code span, with whether it is inline (there ``|`` separates alternatives)."""
    out = []
    for block in CODE_BLOCK.findall(text):
        out += [(line, False) for line in block.replace("\\\n", " ").splitlines()]
    prose = CODE_BLOCK.sub("", text)
    for paragraph in re.split(r"\n\s*\n", prose):  # a span never runs across paragraphs
        out += [(" ".join(span.split()), True) for span in INLINE.findall(paragraph)]
    return out


def _pieces(snippet: str, inline: bool) -> list[str]:
    """A snippet cut into single commands: comments, pipes and redirections dropped."""
    text = re.sub(r"<[^>]*>", "X", snippet.replace("\\|", "|"))  # <placeholder> -> one word
    text = re.split(r"\s#", text)[0]
    pieces = re.split(r"&&|;|\s[12]?>", text)
    if not inline:
        pieces = [p.split("|")[0] for p in pieces]
    return pieces


def _words(text: str) -> list[str]:
    text = text.replace("[", " ").replace("]", " ").replace("...", " ").replace("…", " ")
    try:
        words = shlex.split(text)
    except ValueError:  # an unclosed quote in prose: plain words will do
        words = text.split()
    return [w for w in words if w]


def python_commands(text: str) -> list[list[str]]:
    """Each ``python -m`` (or ``python script``) command as words, package (or script) first;
    ``a | b`` alternatives become one
    command each, sharing the first one's words before its last subcommand."""
    commands = []
    for snippet, inline in snippets(text):
        for piece in _pieces(snippet, inline):
            found = PYTHON_M.search(piece)
            if not found or found.group(1).startswith("-"):  # `python -c ...`
                continue
            alternatives = found.group(1).split("|") if inline else [found.group(1)]
            first = _words(alternatives[0])
            commands.append(first)
            for alt in alternatives[1:]:
                words = _words(alt)
                if words:  # `--accept | --drop` keeps the words before; `list | show` replaces one
                    shared = _lead(commands[-1]) if words[0][0] == "-" else _lead(first)[:-1]
                    commands.append(shared + words)
    return [c for c in commands if c]


def _lead(words: list[str]) -> list[str]:
    """The words of a command before its first flag or ``NAME=VALUE``."""
    return words[: next((i for i, w in enumerate(words) if w[0] == "-" or "=" in w), len(words))]


def make_targets(text: str) -> list[str]:
    """The target each ``make ...`` in the text names (variables and options left out)."""
    targets = []
    for snippet, inline in snippets(text):
        for piece in _pieces(snippet, inline):
            found = MAKE.search(piece)
            if found:
                words = [w for w in _words(found.group(1)) if w[0] != "-" and "=" not in w]
                # `make llama from one source`, `make run`'s: the first word is the target
                targets += [w.removesuffix("'s") for w in words[:1]]
    return targets


def makefile_rules(makefile: str) -> set[str]:
    """Targets the Makefile defines with a rule (``a b: deps``), variables left out."""
    rules = set()
    for line in makefile.splitlines():
        found = re.match(r"^([A-Za-z0-9_. -]+?)\s*:(?![:=])", line)
        if found:
            rules |= set(found.group(1).split())
    return rules - {".PHONY"}


def project_packages() -> set[str]:
    """The packages with a ``__main__`` of their own: what ``python -m`` runs here."""
    return {p.parent.name for p in ROOT.glob("*/__main__.py")}


@cache
def help_of(argv: tuple[str, ...]) -> tuple[int, str]:
    """Exit code and output of ``python -m <argv> --help`` (``python app.py`` for ``app.py``), in
    this process: ``main`` called with the words (``if __name__ == "__main__"`` lines skipped)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            module = "app" if argv[0] == "app.py" else f"{argv[0]}.__main__"
            code = importlib.import_module(module).main([*argv[1:], "--help"])
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        except Exception as err:  # an import that fails is a command that does not run
            code, _ = 1, print(f"{type(err).__name__}: {err}", file=out)
    return code or 0, out.getvalue()


def problems(commands: list[list[str]]) -> list[str | None]:
    """:func:`problem` of each command, one child process per package, run side by side (each
    package's help imports its own modules; a child keeps their state out of this process)."""
    by_package: dict[str, list[int]] = {}
    for i, command in enumerate(commands):
        by_package.setdefault(command[0], []).append(i)

    def check(indices: list[int]) -> list[str | None]:
        done = subprocess.run(
            [sys.executable, __file__, json.dumps([commands[i] for i in indices])],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])

    found: list[str | None] = [None] * len(commands)
    with ThreadPoolExecutor(len(by_package) or 1) as pool:
        for indices, answers in zip(
            by_package.values(), pool.map(check, by_package.values()), strict=True
        ):
            for i, answer in zip(indices, answers, strict=True):
                found[i] = answer
    return found


def problem(command: list[str]) -> str | None:
    """Why a documented ``python -m`` command would not parse, or None when it does.

    Its subcommand path is found word by word: a lowercase word extends it when
    ``<path> <word> --help`` prints another help than ``<path> --help`` (a positional value
    prints the same). The help of the whole path must then name every ``--flag`` given.
    """
    path = [command[0]]
    code, text = help_of(tuple(path))
    if code != 0:
        return f"`python -m {command[0]} --help` exits {code}: {text.strip()[-300:]}"
    for word in command[1:]:
        if word.startswith("-") or not SUBCOMMAND.fullmatch(word):
            break
        code, deeper = help_of((*path, word))
        if code != 0 or "invalid choice" in deeper:
            return f"`python -m {' '.join([*path, word])} --help` exits {code}: {deeper[-300:]}"
        if deeper == text:
            break
        path, text = [*path, word], deeper
    missing = [f for f in (FLAG.match(w) for w in command[1:]) if f]
    missing = [
        f.group() for f in missing if not re.search(rf"(?<![\w-]){f.group()}(?![\w-])", text)
    ]
    if missing:
        return f"`python -m {' '.join(path)} --help` names no {', '.join(missing)}"
    return None


def documented_python_commands() -> dict[str, list[list[str]]]:
    """Each document's ``python -m`` commands of this project's packages, and ``python app.py``."""
    ours = project_packages() | {"app.py"}
    found = {}
    for doc in documents():
        commands = [
            c
            for c in python_commands(doc.read_text())
            if c[0] in ours or c[0].split(".")[0] in ours
        ]
        if commands:
            found[doc.relative_to(ROOT).as_posix()] = commands
    return found


def linked_files(doc: Path) -> set[Path]:
    """Files a markdown document links to (links and pictures), anchors dropped."""
    text = doc.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    out = set()
    for target in targets:
        target = target.split("#")[0]
        if target and "://" not in target:
            out.add((doc.parent / target).resolve())
    return out


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


def test_the_extractors_find_commands_alternatives_and_targets_in_made_up_text():
    text = (
        "Run `python -m finetune train --data d.csv [--name N]` or\n"
        "`python -m adapters alias list \\| show NAME \\| set NAME v3=90 [--force \\| --no-x]`,\n"
        "`python -m feedback review ID --accept | --drop`.\n\n"
        "```bash\n.venv/bin/python -m bench gpu-check \\\n  --row-timeout 75 | tee log  # note\n"
        "TEST_WORKERS=1 make test TEST_MODEL_CACHE=   # fresh\n```\n"
        "- an item:\n\n  ```bash\n  python -m serve --port 80 \\\n    --engine auto\n  ```\n"
        "`make run HOST=0.0.0.0`, and `cmake --build` is not make; `python app.py --port 80`.\n"
    )
    assert python_commands(text) == [
        ["bench", "gpu-check", "--row-timeout", "75"],
        ["serve", "--port", "80", "--engine", "auto"],
        ["finetune", "train", "--data", "d.csv", "--name", "N"],
        ["adapters", "alias", "list"],
        ["adapters", "alias", "show", "NAME"],
        ["adapters", "alias", "set", "NAME", "v3=90", "--force"],
        ["adapters", "alias", "set", "NAME", "--no-x"],
        ["feedback", "review", "ID", "--accept"],
        ["feedback", "review", "ID", "--drop"],
        ["app.py", "--port", "80"],
    ]
    assert make_targets(text) == ["test", "run"]
    assert {"run", "test", "setup", "llama", "llama-server"} <= makefile_rules(
        (ROOT / "Makefile").read_text()
    )
    assert "TEST_WORKERS" not in makefile_rules((ROOT / "Makefile").read_text())


def test_the_checker_refuses_a_renamed_subcommand_and_an_unknown_flag():
    found = problems(
        [
            ["finetune", "train", "--data", "d.csv", "--time-budget", "10m"],
            ["adapters", "alias", "set", "support-bot", "--min-requests", "5"],
            ["adapters", "show", "demo", "--json"],
            ["finetune", "trian", "--data", "d.csv"],
            ["finetune", "train", "--colour", "red"],
            ["finetune", "train", "--lora"],  # no --lora-top-layers: flags match whole
            ["adapters", "alias", "sets", "support-bot"],
            ["app.py", "--host", "127.0.0.1", "--auth", "a:b"],
            ["app.py", "--hots", "127.0.0.1"],
        ]
    )
    assert found[:3] == [None, None, None], found
    assert "finetune trian --help` exits 2" in found[3] and "invalid choice" in found[3]
    assert found[4].endswith("finetune train --help` names no --colour")
    assert found[5].endswith("names no --lora")
    assert "adapters alias sets --help` exits 2" in found[6]
    assert found[7] is None and found[8].endswith("app.py --help` names no --hots")


def test_every_documented_python_command_parses():
    commands = documented_python_commands()
    assert sum(map(len, commands.values())) >= 30, commands  # the extractor found the docs' own
    jobs = [(doc, c) for doc, cs in commands.items() for c in cs]
    found = problems([c for _, c in jobs])
    broken = [
        f"{doc}: python -m {' '.join(c)}\n    {why}"
        for (doc, c), why in zip(jobs, found, strict=True)
        if why
    ]
    assert broken == [], "\n".join(broken)


def test_every_documented_make_target_is_a_rule_of_the_makefile():
    rules = makefile_rules((ROOT / "Makefile").read_text())
    named = {doc.relative_to(ROOT).as_posix(): make_targets(doc.read_text()) for doc in documents()}
    assert {"run", "test"} <= set(named["README.md"])
    unknown = {doc: sorted(set(t) - rules) for doc, t in named.items() if set(t) - rules}
    assert unknown == {}, f"make targets the Makefile does not define: {unknown}"


def test_every_doc_is_linked_from_the_readme_or_the_guide():
    linked = linked_files(ROOT / "README.md") | linked_files(ROOT / "docs" / "guide.md")
    docs = [p for p in (ROOT / "docs").rglob("*") if p.is_file() and "img" not in p.parts]
    unlinked = sorted(p.relative_to(ROOT).as_posix() for p in docs if p.resolve() not in linked)
    assert docs and unlinked == [], f"linked from neither README.md nor docs/guide.md: {unlinked}"


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


def test_every_relative_link_and_anchor_of_the_docs_resolves():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = {d.relative_to(ROOT).as_posix(): b for d in docs if (b := broken_links(d))}
    assert broken == {}, broken


if __name__ == "__main__":  # a child of problems(): commands as JSON in, their problems out
    sys.path.insert(0, str(ROOT))
    print(json.dumps([problem(c) for c in json.loads(sys.argv[1])]))
