"""`python -m knowledge search QUERY --name NAME`: the passages that best match, best first."""

from __future__ import annotations

import json

from knowledge.actions import DEFAULT_NAME


def add_arguments(p) -> None:
    p.add_argument("query", help="what a customer asks")
    p.add_argument(
        "--name",
        help=f"knowledge base to search (default: {DEFAULT_NAME}, or the only knowledge base "
        "when there is just one)",
    )
    p.add_argument("--version", default="latest", help="version to search (default: %(default)s)")
    p.add_argument("-k", type=int, default=3, help="passages returned (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="the answer as the /v1 route gives it")


def main(args) -> int:
    from knowledge.actions import search

    found = search(args.query, args.name or _default_name(), args.version, args.k)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return 0
    about = f", routed to {found['intent']}" if found["intent"] else ""
    print(f"{found['knowledge']} {found['version']}: {len(found['passages'])} passage(s){about}")
    for hit in found["passages"]:
        first = (
            "  (the intent's article: shown first)"
            if found["intent"]
            and hit["kind"] != "past_answer"
            and hit.get("intent") == found["intent"]
            else ""
        )
        print(f"\n#{hit['id']}  score {hit['score']:.3f}  {hit['kind']}  {hit['source']}{first}")
        print(f"  {hit['title']}")
        print("  " + hit["text"][:300].replace("\n", "\n  "))
    return 0


def _default_name() -> str:
    """The knowledge base searched without ``--name``: ``articles``, else the only one there is.

    Raises:
        ValueError: several knowledge bases and none named ``articles``; the sentence names them.
    """
    from knowledge.store import KnowledgeShelf

    names = KnowledgeShelf().names()
    if len(names) == 1 and DEFAULT_NAME not in names:
        return names[0]
    if len(names) > 1 and DEFAULT_NAME not in names:
        raise ValueError(
            f"no knowledge base is named {DEFAULT_NAME!r}, the one searched without --name; "
            f"pass --name with one of: {', '.join(names)}"
        )
    return DEFAULT_NAME  # there, or none at all: the shelf's own sentence says to import one
