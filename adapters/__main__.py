"""`python -m adapters <command>`: the adapter shelf from the command line.

Each command is a module in ``adapters/commands`` with ``add_arguments(parser)`` and
``main(args) -> int``. The shelf commands make the same engine calls as the Adapters tab
(:mod:`adapters.shelf_actions`) and print the same sentences; bad input exits with code 2.
"""

from __future__ import annotations

import sys

from core import cli

COMMANDS: cli.CommandTable = {
    "list": (
        "adapters.commands.list_",
        "list the adapters on the shelf (broken ones with their reason)",
    ),
    "show": ("adapters.commands.show", "show one adapter's manifest"),
    "rename": ("adapters.commands.rename", "rename an adapter"),
    "delete": ("adapters.commands.delete", "delete an adapter for good (needs --yes)"),
    "import": ("adapters.commands.import_", "import a PEFT LoRA adapter (folder or .zip)"),
    "export": ("adapters.commands.export", "export an adapter as a .zip or a merged model"),
    "export-gguf": (
        "adapters.commands.export_gguf",
        "export an adapter as GGUF (merged and/or base + LoRA) with an Ollama Modelfile",
    ),
    "gate": (
        "adapters.commands.gate",
        "show or edit an adapter's release gate rules and whether it passed",
    ),
    "alias": (
        "adapters.commands.alias",
        "stable model names over weighted versions: list, show, set, promote, rollback, delete",
    ),
}


def main(argv: list[str] | None = None) -> int:
    return cli.run("python -m adapters", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    from core.optional_imports import keep_bitsandbytes_out

    keep_bitsandbytes_out()  # the shelf and exports quantize nothing: 1.3-1.5 s less at each start
    sys.exit(main())
