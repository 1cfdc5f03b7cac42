"""`python -m knowledge import FILE... --name NAME`: files become the next version."""

from __future__ import annotations

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

    print(import_files(args.files, args.name, kind=args.kind, replace=args.replace))
    return 0
