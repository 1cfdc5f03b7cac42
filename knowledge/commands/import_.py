"""`python -m knowledge import FILE... --name NAME`: files become the next version."""

from __future__ import annotations

from pathlib import Path

from knowledge.actions import DEFAULT_NAME


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", help="Markdown, HTML, plain text, CSV or JSONL files")
    p.add_argument(
        "--name", default=DEFAULT_NAME, help="knowledge base name (default: %(default)s)"
    )
    p.add_argument(
        "--kind",
        choices=("past_answer", "article", "macro"),
        default=None,
        help="every passage's kind (default: past_answer for question/answer rows, "
        "article otherwise)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="the new version holds these files only (default: added to the latest version)",
    )


def main(args) -> int:
    from knowledge.actions import import_files

    for name in args.files:
        check_file(name)
    print(import_files(args.files, args.name, kind=args.kind, replace=args.replace))
    return 0


def check_file(name: str) -> None:
    """Refuse a path that is no file, in a sentence: a missing one (a name typed where a file
    goes, ``import help.md support``, said "unknown file type '(none)'") or a folder.

    Raises:
        FileNotFoundError: nothing is there; ValueError: it is a folder.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        raise ValueError(f"{name} is a folder; name the files in it ({name}/*.md, ...)")
    if not path.exists():
        hint = "; a knowledge base's name goes after --name" if not path.suffix else ""
        raise FileNotFoundError(f"{name} does not exist{hint}")
