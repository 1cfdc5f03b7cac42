"""The one CLI dispatcher: every ``python -m <package>`` is a table of commands run through it.

A command is a module. It either has ``add_arguments(parser)`` and ``main(args) -> int`` (the
table builds its sub-parser), or only ``main(argv) -> int`` with a parser of its own, which
then gets the rest of the command line. Only the module of the command being run is imported,
so ``--help`` and light commands start fast. Bad input (``ValueError``, a file named that is
missing or unreadable) ends in one sentence on stderr and exit code 2, as argparse's own errors
do. Output cut short by its reader (``| head``) ends quietly with 141, as a shell command
killed by SIGPIPE. Anything else is an internal error: one line on stderr naming it and a log
file under the home folder (``logs/``) holding its traceback, and exit code 1 (:func:`guarded`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

# name -> (module, one line of help)
CommandTable = dict[str, tuple[str, str]]
# Bad input: a value refused in a sentence, a path given that is missing or unreadable.
BAD_INPUT = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


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
        default is None or default is False or default == argparse.SUPPRESS or default in ("", [])
    )


def run(
    prog: str, description: str, commands: CommandTable, argv: Sequence[str] | None = None
) -> int:
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
            rest = argv[argv.index(chosen) + 1 :]
            return guarded(lambda: module.main(rest), prog)
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=DefaultsFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parsers = {}
    for name, (module_name, help_text) in commands.items():
        parsers[name] = p = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=DefaultsFormatter
        )
        if name == chosen:
            importlib.import_module(module_name).add_arguments(p)
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused under the command's usage, not the program's: the flag is what is wrong
        parsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return guarded(lambda: importlib.import_module(commands[args.command][0]).main(args), prog)


def guarded(call: Callable[[], int | None], prog: str) -> int:
    """Run a command: its exit code; bad input (:data:`BAD_INPUT`) is one sentence and 2, any
    other exception one line naming it and the log holding its traceback, and 1."""
    try:
        return call() or 0
    except BAD_INPUT as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``| head``): an end, as for ls or grep
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe closed
    except Exception as err:  # a bug or the machine, not the input: the trace is kept for a report
        log = _trace_log(prog)
        first = next((line for line in str(err).splitlines() if line.strip()), "")[:300]
        print(
            f"error: internal error ({type(err).__name__}{': ' + first if first else ''}); "
            f"the traceback is in {log}",
            file=sys.stderr,
        )
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the exit's own flush of what is left raises no second
    BrokenPipeError."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _trace_log(prog: str) -> Path:
    """The current exception's traceback in ``<home>/logs/<command>-<time>-<pid>.log`` (the
    temp folder when the home cannot take it)."""
    from core import paths

    name = f"{prog.split()[-1]}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    text = traceback.format_exc()
    for folder in (lambda: paths.home() / "logs", lambda: Path(tempfile.gettempdir())):
        try:
            path = folder() / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path
        except OSError:
            continue
    return Path("(no log: neither the home nor the temp folder takes writes)")
