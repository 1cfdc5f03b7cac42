"""`python -m adapters alias ...`: stable model names over weighted adapter versions.

    python -m adapters alias list
    python -m adapters alias show support-bot
    python -m adapters alias set support-bot support-v3=90 support-v4=10
    python -m adapters alias set support-bot support-v4=100 --force --reason "hotfix, gate pending"
    python -m adapters alias promote support-bot support-v4
    python -m adapters alias rollback support-bot
    python -m adapters alias delete support-bot

A version may gain traffic only when its release gate passed (``--force --reason`` overrides,
and the audit log in ``$TUNEDESK_HOME/releases/audit.jsonl`` keeps why). A running server
picks up every change at its next request, without a restart.
"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="every alias and its split")
    listing.add_argument("--json", action="store_true", help="alias -> split as JSON")
    show = sub.add_parser("show", help="one alias: its split, each version's gate, its last changes")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="the split and its whole history as JSON")
    put = sub.add_parser("set", help="give an alias its split (creates it): VERSION=WEIGHT ..., summing to 100")
    put.add_argument("name")
    put.add_argument("split", nargs="+", metavar="VERSION=WEIGHT")
    promote = sub.add_parser("promote", help="all new conversations to VERSION (the others finish theirs)")
    promote.add_argument("name")
    promote.add_argument("version")
    rollback = sub.add_parser("rollback", help="back to the split before the last change, in one step")
    rollback.add_argument("name")
    delete = sub.add_parser("delete", help="remove an alias (rollback restores it)")
    delete.add_argument("name")
    for changing in (put, promote, rollback, delete):
        changing.add_argument("--by", help="who makes the change, for the audit log (default: your login)")
    for gated in (put, promote, rollback):
        gated.add_argument("--force", action="store_true",
                           help="let a version whose release gate has not passed gain traffic (needs --reason)")
        gated.add_argument("--reason", default="", help="why the override: kept in the audit log")


def main(args) -> int:
    from adapters import alias_actions as actions
    from adapters.shelf.aliases import AliasBook

    book = AliasBook()
    by = getattr(args, "by", None) or actions.who("cli")
    gate = {"force": getattr(args, "force", False), "reason": getattr(args, "reason", "")}
    if args.action == "list":
        aliases = book.all()
        if args.json:
            print(json.dumps(aliases, indent=2))
            return 0
        if not aliases:
            print("No aliases yet: `python -m adapters alias set NAME VERSION=100` makes one.")
        for name, split in aliases.items():
            print(f"{name:32} {actions.split_text(split)}")
    elif args.action == "show":
        if args.json:
            print(json.dumps({"name": args.name, "versions": book.get(args.name),
                              "history": book.history(args.name)}, indent=2))
        else:
            print("\n".join(actions.details(args.name, book)))
    elif args.action == "set":
        print(actions.set_split(args.name, args.split, by, **gate, book=book))
    elif args.action == "promote":
        print(actions.promote(args.name, args.version, by, **gate, book=book))
    elif args.action == "rollback":
        print(actions.rollback(args.name, by, **gate, book=book))
    else:
        print(actions.delete(args.name, by, book=book))
    return 0
