"""`python -m knowledge <command>`: the knowledge shelf (what the bot may answer from).

Each command is a module in ``knowledge/commands`` with ``add_arguments(parser)`` and
``main(args) -> int``; bad input (a file that is not text, an unknown name) exits with code 2
and one sentence.
"""

from __future__ import annotations

import sys

from core import cli

COMMANDS: cli.CommandTable = {
    "import": (
        "knowledge.commands.import_",
        "import Markdown, HTML, text, CSV or JSONL files as a new version",
    ),
    "list": (
        "knowledge.commands.list_",
        "list knowledge bases, one's versions, or one version's passages",
    ),
    "search": ("knowledge.commands.search", "search a version (BM25 over its FTS5 index)"),
    "delete": (
        "knowledge.commands.delete",
        "delete a version, or a whole knowledge base (needs --yes)",
    ),
}


def main(argv: list[str] | None = None) -> int:
    return cli.run("python -m knowledge", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
