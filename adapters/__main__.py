"""`python -m adapters <command>`: the adapter shelf from the command line.

A table of commands, each a module in ``adapters/commands`` with ``add_arguments(parser)``
and ``main(args) -> int``. The shelf commands make the same engine calls as the Adapters tab
(:mod:`adapters.shelf_actions`) and print the same sentences; bad input exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "list": ("adapters.commands.list_", "list the adapters on the shelf (broken ones with their reason)"),
    "show": ("adapters.commands.show", "show one adapter's manifest"),
    "rename": ("adapters.commands.rename", "rename an adapter"),
    "delete": ("adapters.commands.delete", "delete an adapter for good (needs --yes)"),
    "import": ("adapters.commands.import_", "import a PEFT LoRA adapter (folder or .zip)"),
    "export": ("adapters.commands.export", "export an adapter as a .zip or a merged model"),
    "export-gguf": ("adapters.commands.export_gguf",
                    "export an adapter as GGUF (merged and/or base + LoRA) with an Ollama Modelfile"),
    "gate": ("adapters.commands.gate", "show or edit an adapter's release gate rules and whether it passed"),
    "serve": ("adapters.commands.serve", "serve the base model and the shelf's adapters over an OpenAI-compatible API"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # A name on disk or on the command line may hold undecodable bytes (surrogates): print
    # them escaped rather than fail with UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
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
        # Bad input (or a missing tool) gets one clear sentence, not a traceback; argparse
        # also exits with 2.
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
