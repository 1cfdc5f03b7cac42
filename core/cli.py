"""The one CLI dispatcher: every ``python -m <package>`` is a table of commands run through it.

A command is a module. It either has ``add_arguments(parser)`` and ``main(args) -> int`` (the
table builds its sub-parser), or only ``main(argv) -> int`` with a parser of its own, which
then gets the rest of the command line. Only the module of the command being run is imported,
so ``--help`` and light commands start fast. Bad input (``ValueError``, ``OSError``,
``RuntimeError``) ends in one sentence on stderr and exit code 2, as argparse's own errors do.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import sys
from collections.abc import Callable, Sequence

# name -> (module, one line of help)
CommandTable = dict[str, tuple[str, str]]
USER_ERRORS = (ValueError, RuntimeError, OSError)


class DefaultsFormatter(argparse.HelpFormatter):
    """argparse's help with each flag's default, where it has one to show (not None, False or
    empty) and its help does not say it already: ``--port PORT  (default: 8000)``. A flag whose
    default is None says its effective default in its own help text."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and shows_default(action):  # a flag with no help says its default
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text == argparse.SUPPRESS or "default" in text or not shows_default(action):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def shows_default(action: argparse.Action) -> bool:
    """Whether ``action`` is a flag with a default worth showing (not None, False or empty)."""
    default = action.default
    return bool(action.option_strings) and not (
        default is None or default is False or default == argparse.SUPPRESS or default in ("", []))


def run(prog: str, description: str, commands: CommandTable, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` against ``commands`` and run the chosen one; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # A name on disk or on the command line may hold undecodable bytes (surrogates): print
    # them escaped rather than fail with UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in commands:
        module = importlib.import_module(commands[chosen][0])
        if not hasattr(module, "add_arguments"):  # a command that parses its own line
            rest = argv[argv.index(chosen) + 1:]
            return _guarded(lambda: module.main(rest))
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=DefaultsFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=DefaultsFormatter)
        if name == chosen:
            importlib.import_module(module_name).add_arguments(p)
    args = parser.parse_args(argv)
    return _guarded(lambda: importlib.import_module(commands[args.command][0]).main(args))


def _guarded(call: Callable[[], int | None]) -> int:
    try:
        return call() or 0
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
