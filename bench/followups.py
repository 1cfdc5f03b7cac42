"""`python -m bench follow-ups`: two-turn conversations, the second message read alone and read
as grounding reads it (:func:`knowledge.followups.asked_in`).

Each conversation of ``assets/demo_conversations.jsonl`` (written for this bench, not from the
demo rows) is a customer's first message and second message, labelled with the intent the
second one needs answered, in three kinds: a ``follow-up`` (the same request, not named again:
"how long will that take?"), a ``switch`` (a new request in a full question) and a
``short-switch`` (a new request in a few words: "invoice?"). The knowledge version is the demo's
past answers (``assets/demo_support.jsonl``) beside its labelled help center, or one on the
shelf (``--knowledge NAME[@vN]``) with a conversations file of the same shape
(``--conversations``). Per kind it counts:

- **right passage first**: the search's first passage is labelled with the needed intent;
- **a right answer sent as it is**: the check before an answer is sent
  (:func:`knowledge.answer_check.check_answer`), given the needed intent's labelled article
  as the answer (a stand-in for a right one), says ``ok``, rather than replacing it or
  handing the customer off.

    python -m bench follow-ups [--knowledge NAME[@vN] --conversations FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONVERSATIONS = REPO / "assets" / "demo_conversations.jsonl"
DEMO_ROWS = REPO / "assets" / "demo_support.jsonl"
HELP_CENTER = REPO / "assets" / "demo_help_center.md"
KINDS = ("follow-up", "switch", "short-switch")
FIELDS = ("first", "second", "second_intent", "kind")


def read_conversations(path: Path) -> list[dict]:
    """The conversations of a JSON Lines file (each with :data:`FIELDS`).

    Raises:
        ValueError: a line that is not such an object, naming its number.
    """
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path.name} line {number} is not JSON: {err.msg}") from None
        if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in FIELDS):
            raise ValueError(f"{path.name} line {number} needs the text fields {', '.join(FIELDS)}")
        out.append(row)
    if not out:
        raise ValueError(f"{path.name} has no conversations")
    return out


def demo_version(shelf):
    """The demo's past answers beside its labelled help center, as one knowledge version."""
    from knowledge.importers import read_passages
    from knowledge.passages import Passage

    rows = [json.loads(line) for line in DEMO_ROWS.read_text(encoding="utf-8").splitlines()]
    past = [
        Passage(r["instruction"][:120], r["response"], f"{DEMO_ROWS.name}:row {i}",
                "past_answer", r["instruction"], r["intent"])
        for i, r in enumerate(rows, start=1)
    ]  # fmt: skip
    version, _ = shelf.add(
        "follow-ups-demo", past + read_passages(HELP_CENTER), [DEMO_ROWS.name, HELP_CENTER.name]
    )
    return version


def measure(version, conversations: list[dict], shelf) -> dict:
    """Per kind: conversations, right passage first and right answers sent as they are, with
    the second message read alone and read as grounding reads it."""
    from knowledge.answer_check import check_answer
    from knowledge.followups import asked_in
    from knowledge.routing import routed_search

    articles = {
        p.intent: p.text for _, p in version.passages_page() if p.intent and p.kind != "past_answer"
    }
    counts: dict[str, Counter] = {}
    for c in conversations:
        messages = [
            {"role": "user", "content": c["first"]},
            {"role": "assistant", "content": "..."},
            {"role": "user", "content": c["second"]},
        ]
        asked = asked_in(version, messages)
        n = counts.setdefault(c["kind"], Counter())
        n["conversations"] += 1
        n["read with the earlier message"] += asked.earlier > 0
        for how, text in (("alone", c["second"]), ("as grounding reads it", asked.text)):
            hits = routed_search(version, text, 1).hits
            n[f"right passage first, {how}"] += (
                bool(hits) and hits[0].passage.intent == c["second_intent"]
            )
            answer = articles.get(c["second_intent"])
            if answer is not None:
                n[f"answers checked, {how}"] += 1
                outcome = check_answer(
                    text, answer, version.name, version.version, shelf=shelf
                ).outcome
                n[f"right answer sent as it is, {how}"] += outcome == "ok"
    return {
        kind: dict(counts[kind])
        for kind in [*KINDS, *sorted(set(counts) - set(KINDS))]
        if kind in counts
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench follow-ups",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--knowledge", metavar="NAME[@vN]", help="a knowledge base on the shelf "
                   "(default: the demo's past answers and help center, made here)")  # fmt: skip
    p.add_argument("--conversations", type=Path, default=CONVERSATIONS,
                   help="JSON Lines of first, second, second_intent, kind")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    args = p.parse_args(argv)
    from knowledge.store import LATEST, KnowledgeShelf

    try:
        conversations = read_conversations(args.conversations)
        if args.knowledge:
            name, _, version = args.knowledge.partition("@")
            shelf = KnowledgeShelf()
            results = measure(shelf.get(name, version or LATEST), conversations, shelf)
        else:
            with tempfile.TemporaryDirectory(prefix="tunedesk-follow-ups-") as tmp:
                shelf = KnowledgeShelf(Path(tmp))
                results = measure(demo_version(shelf), conversations, shelf)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for kind, n in results.items():
        total = n["conversations"]
        read_with = n["read with the earlier message"]
        print(f"{kind} ({total} conversations, {read_with} read with the earlier message)")
        for what in ("right passage first", "right answer sent as it is"):
            alone, read = n.get(f"{what}, alone", 0), n.get(f"{what}, as grounding reads it", 0)
            of = total if what == "right passage first" else n.get("answers checked, alone", 0)
            print(f"  {what:28} alone {alone:>3} / {of:<3}  as grounding reads it {read:>3} / {of}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
