"""`python -m adapters alias ...`: stable model names over weighted adapter versions.

    python -m adapters alias list
    python -m adapters alias show support-bot
    python -m adapters alias set support-bot support-v3=90 support-v4=10
    python -m adapters alias set support-bot support-v4=100 --force --reason "hotfix, gate pending"
    python -m adapters alias set support-bot --auto-rollback-margin 0.1 --min-requests 50
    python -m adapters alias set support-bot --no-auto-rollback
    python -m adapters alias set support-bot --grounding faq@v2     # or off, auto (the default)
    python -m adapters alias promote support-bot support-v4
    python -m adapters alias rollback support-bot
    python -m adapters alias delete support-bot

A version may gain traffic only when its release gate passed (``--force --reason`` overrides,
and the audit log in the home's store keeps why: ``core/store``). A running server
picks up every change at its next request, without a restart.

With ``--auto-rollback-margin`` the server rolls a canary back by itself (audited as
``auto-rollback``) when its error rate or thumbs-down rate, since the split took effect,
exceeds the stable version's (the one with the largest weight) by more than the margin.

``--grounding`` says what the alias's answers are grounded in: ``auto`` (each version's own
trained-beside knowledge, the default), ``off``, or a knowledge base ``NAME[@vN]``. A request
to the alias is grounded as the alias says; its own ``knowledge`` field may not say otherwise.
"""

from __future__ import annotations

import json

from core import cli

NAME_HELP = "the alias (a stable model name clients ask for, such as support-bot)"


class _Actions:
    """The actions' sub-parsers, each with its help as its description (``alias set --help``
    says what set does) and flags' defaults shown, as the commands' own parsers do."""

    def __init__(self, sub):
        self.sub = sub

    def add_parser(self, name: str, help: str):  # noqa: A002  (argparse's own word)
        return self.sub.add_parser(
            name, help=help, description=help, formatter_class=cli.DefaultsFormatter
        )


def add_arguments(p) -> None:
    sub = _Actions(p.add_subparsers(dest="action", required=True))
    listing = sub.add_parser("list", help="every alias and its split")
    listing.add_argument("--json", action="store_true", help="alias -> split as JSON")
    show = sub.add_parser(
        "show", help="one alias: its split, each version's gate, its last changes"
    )
    show.add_argument("name", help=NAME_HELP)
    show.add_argument("--json", action="store_true", help="the split and its whole history as JSON")
    put = sub.add_parser(
        "set",
        help="give an alias its split (creates it): VERSION=WEIGHT ..., summing to 100; "
        "without one, change only its automatic rollback",
    )
    put.add_argument("name", help=NAME_HELP)
    put.add_argument(
        "split",
        nargs="*",
        metavar="VERSION=WEIGHT",
        help="an adapter on the shelf and its share of new conversations, in percent (v3=90 v4=10)",
    )
    put.add_argument(
        "--auto-rollback-margin",
        type=float,
        metavar="M",
        help="roll a canary back by itself when its error or thumbs-down rate exceeds the stable "
        "version's by more than M (0.1: ten points)",
    )
    put.add_argument(
        "--min-requests",
        type=int,
        metavar="N",
        help=(
            "answers each version needs since the split before error rates are compared "
            "(default 50)"
        ),
    )
    put.add_argument(
        "--min-ratings",
        type=int,
        metavar="N",
        help="ratings each version needs before thumbs-down rates are compared (default 10)",
    )
    put.add_argument(
        "--no-auto-rollback", action="store_true", help="turn the automatic rollback off"
    )
    put.add_argument(
        "--check",
        choices=("on", "off"),
        help="check each answer's intent before it is sent (default: as it is; a new alias: off)",
    )
    put.add_argument(
        "--grounding",
        metavar="G",
        help="what its answers are grounded in: auto (each version's own "
        "knowledge; the default), off, or a knowledge base NAME or NAME@vN",
    )
    promote = sub.add_parser(
        "promote", help="all new conversations to VERSION (the others finish theirs)"
    )
    promote.add_argument("name", help=NAME_HELP)
    promote.add_argument(
        "version", help="the adapter on the shelf that takes all new conversations"
    )
    rollback = sub.add_parser(
        "rollback", help="back to the split before the last change, in one step"
    )
    rollback.add_argument("name", help=NAME_HELP)
    delete = sub.add_parser("delete", help="remove an alias (rollback restores it)")
    delete.add_argument("name", help=NAME_HELP)
    for changing in (put, promote, rollback, delete):
        changing.add_argument(
            "--by", help="who makes the change, for the audit log (default: your login)"
        )
    for gated in (put, promote, rollback):
        gated.add_argument(
            "--force",
            action="store_true",
            help="let a version whose release gate has not passed gain traffic (needs --reason)",
        )
        gated.add_argument("--reason", default="", help="why the override: kept in the audit log")


def auto_rollback(args, book):
    """The automatic rollback the flags ask for: the alias's own with the flags laid over it,
    None (off), or ``KEEP`` when no flag is given."""
    from adapters.shelf.alias_rules import AliasError
    from adapters.shelf.aliases import KEEP, AliasNotFoundError

    given = {
        key: value
        for key, value in (
            ("margin", args.auto_rollback_margin),
            ("min_requests", args.min_requests),
            ("min_ratings", args.min_ratings),
        )
        if value is not None
    }
    if args.no_auto_rollback:
        if given:
            raise AliasError(
                "--no-auto-rollback turns it off; leave out --auto-rollback-margin, --min-requests "
                "and --min-ratings",
                "auto_rollback",
            )
        return None
    if not given:
        return KEEP
    try:
        current = book.row(args.name).get("auto_rollback") or {}
    except AliasNotFoundError:
        current = {}
    if "margin" not in {**current, **given}:
        raise AliasError(
            "--min-requests and --min-ratings need --auto-rollback-margin M (the alias has no "
            "automatic rollback yet)",
            "auto_rollback.margin",
        )
    return {**current, **given}


def main(args) -> int:
    from adapters import alias_actions as actions
    from adapters.shelf.aliases import KEEP, AliasBook, grounding_of

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
            policy = book.row(name).get("auto_rollback")
            guard = f"  (automatic rollback at +{policy['margin']:g})" if policy else ""
            ground = grounding_of(book.row(name))
            guard += "" if ground == "auto" else f"  (grounding: {ground})"
            print(f"{name:32} {actions.split_text(split)}{guard}")
    elif args.action == "show":
        if args.json:
            print(
                json.dumps(
                    {
                        "name": args.name,
                        "versions": book.get(args.name),
                        "grounding": grounding_of(book.row(args.name)),
                        "history": book.history(args.name),
                    },
                    indent=2,
                )
            )
        else:
            print("\n".join(actions.details(args.name, book)))
    elif args.action == "set":
        print(
            actions.set_split(
                args.name,
                args.split,
                by,
                **gate,
                book=book,
                auto_rollback=auto_rollback(args, book),
                check=_check(args),
                grounding=KEEP if args.grounding is None else known_grounding(args.grounding),
            )
        )
    elif args.action == "promote":
        print(actions.promote(args.name, args.version, by, **gate, book=book))
    elif args.action == "rollback":
        print(actions.rollback(args.name, by, **gate, book=book))
    else:
        print(actions.delete(args.name, by, book=book))
    return 0


def known_grounding(value: str) -> str:
    """``--grounding`` checked as the API and the Adapters tab check it: a knowledge base (and
    version) it names must be on the shelf, else every answer of the alias would be a 400.
    ``adapters`` may not import ``knowledge`` (docs/architecture.md), so the home's folders are
    read as ``knowledge.store`` writes them: ``knowledge/<name>/v<N>/version.json``.

    Raises:
        AliasError: a misspelt grounding, or a knowledge base or version that is not there.
    """
    from adapters.shelf.alias_rules import AliasError, check_grounding, split_grounding
    from core import paths

    named = split_grounding(check_grounding(value))
    if named is None:
        return value
    name, version = named
    root = paths.subdir("knowledge")
    versions = _versions(root / name)
    if not versions:
        known = ", ".join(sorted(p.name for p in root.iterdir() if _versions(p))) or "none yet"
        raise AliasError(
            f"--grounding {value}: no knowledge base named {name!r} on the shelf (knowledge "
            f"bases: {known}); import it first (python -m knowledge import FILE --name {name})",
            "grounding",
        )
    if version != "latest" and int(version[1:]) not in versions:
        listed = ", ".join(f"v{n}" for n in versions)
        raise AliasError(
            f"--grounding {value}: {name} has no version {version!r} (versions: {listed})",
            "grounding",
        )
    return value


def _versions(folder) -> list[int]:
    if not folder.is_dir() or folder.name.startswith("."):
        return []
    found = (p.name[1:] for p in folder.iterdir() if p.name[:1] == "v" and p.name[1:].isdigit())
    return sorted(int(n) for n in found if (folder / f"v{n}" / "version.json").is_file())


def _check(args):
    """The ``--check`` flag, or ``KEEP`` when it is not given."""
    from adapters.shelf.aliases import KEEP

    return args.check or KEEP
