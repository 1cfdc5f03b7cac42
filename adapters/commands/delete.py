"""`python -m adapters delete NAME --yes`: delete an adapter for good."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("name", help="adapter name on the shelf")
    p.add_argument(
        "--yes",
        action="store_true",
        help="confirm: the adapter is deleted for good (the tab's confirmation box)",
    )


def main(args) -> int:
    from adapters.shelf_actions import DELETE_UNCONFIRMED, delete, show

    if not args.yes:
        show(args.name)  # a bad or unknown name is said first
        raise ValueError(f"{DELETE_UNCONFIRMED[:-1]}: add --yes to delete it for good.")
    print(delete(args.name, confirmed=True))
    return 0
