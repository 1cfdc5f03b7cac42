"""`python -m adapters <command>`: the adapter side of TuneDesk from the command line.

A table of commands, each a module in ``adapters/commands`` with ``add_arguments(parser)``
and ``main(args) -> int``; bad input exits with code 2 and one sentence.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "serve": ("adapters.commands.serve", "serve the base model and the shelf's adapters over an OpenAI-compatible API"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m adapters", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == chosen:  # import only the command being run: the CLI starts fast
            importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return importlib.import_module(args._module).main(args) or 0
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
