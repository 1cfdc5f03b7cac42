"""`python -m knowledge delete NAME [--version V] --yes`: delete for good."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("name", help="knowledge base name")
    p.add_argument(
        "--version", default=None, help="delete only this version (default: every version)"
    )
    p.add_argument("--yes", action="store_true", help="confirm: deleted for good")


def main(args) -> int:
    from knowledge.actions import delete

    print(delete(args.name, args.version, confirmed=args.yes))
    return 0
