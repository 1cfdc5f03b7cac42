"""`python -m adapters <command>`: the CLI is a table of commands, each a module in
``adapters/commands`` with ``add_arguments(parser)`` and ``main(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "export-gguf": ("adapters.commands.export_gguf",
                    "export an adapter as GGUF (merged and/or base + LoRA) with an Ollama Modelfile"),
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
    except (ValueError, RuntimeError, OSError) as err:
        # Bad input (or a missing tool) gets one clear sentence, not a traceback.
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
