"""`python -m adapters rename OLD NEW`: rename an adapter (never over an existing one)."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("old", help="the adapter's name now")
    p.add_argument("new", help="its new name: 1-64 letters, digits, '.', '_' or '-'")


def main(args) -> int:
    from adapters.shelf_actions import rename

    print(rename(args.old, args.new))
    return 0
