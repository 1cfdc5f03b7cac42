"""Docs that cannot drift: every command the README and docs/ name parses, every doc is linked.

Each ``python -m <package> ...`` of this project named in README.md or docs/*.md (code blocks
and inline code; docs/benchmarks-log.md is history and left out) is run with ``--help`` along
its subcommand path: the run must exit 0, and every ``--flag`` the doc gives must appear in that
subcommand's help. Each ``make <target>`` must be a rule of the Makefile. Every file in docs/
(pictures aside) must be linked from README.md or docs/guide.md, so none is left unfound. The
checkers run on made-up text first, so one that cannot fail would show.
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


if __name__ == "__main__":  # a child of problems(): commands as JSON in, their problems out
    sys.path.insert(0, str(ROOT))
    print(json.dumps([problem(c) for c in json.loads(sys.argv[1])]))
