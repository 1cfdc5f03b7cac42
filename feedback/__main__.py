"""`python -m feedback <command>`: the review queue of ratings on served answers.

The same calls as the Review tab (:mod:`feedback.review`); bad input exits with code 2.
"""

from __future__ import annotations

import sys

from core import cli

COMMANDS: cli.CommandTable = {
    "list": (
        "feedback.commands.list_",
        "list ratings (filter by adapter, version, rating, status, intent, dates)",
    ),
    "review": (
        "feedback.commands.review",
        "accept or drop a rating, or edit its correction or intent",
    ),
    "export": (
        "feedback.commands.export",
        "write the accepted ratings as SFT rows and preference pairs",
    ),
}


def main(argv: list[str] | None = None) -> int:
    return cli.run("python -m feedback", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
