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

``--adapter NAME`` also has an adapter answer them (llama.cpp where it can, ``--engine``): its
own grounded answer to the first message, then its answer to the second grounded both ways, in
the knowledge version it was trained beside; counted are the answers the version's answer
classifier takes for the needed intent, before and after the check before sending.

    python -m bench follow-ups [--knowledge NAME[@vN] --conversations FILE] [--adapter NAME]
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


def answer_measure(
    adapter: str, conversations: list[dict], engine: str = "auto", answer_tokens: int = 160
) -> dict:
    """The adapter's answers to the second messages, grounded in its own knowledge version (the
    one it was trained beside) found for the second message alone and as grounding reads it,
    after its own grounded answer to the first: per kind, how many address the needed intent
    (the version's answer classifier), and how many of what the check before sending would
    send do (a hand-off counts as not).

    Raises:
        ValueError: no such adapter, or one trained beside no knowledge version.
    """
    from bench.policy_change import adapter_knowledge
    from core.templates import encode_chats
    from eval.engines import open_answerer
    from inference.generate import GenerationSettings
    from inference.session import ModelSession
    from knowledge.answer_check import check_answer, checker_for
    from knowledge.followups import asked_in
    from knowledge.grounding import ground
    from knowledge.store import KnowledgeShelf

    entry, version = adapter_knowledge(adapter)
    shelf = KnowledgeShelf()
    checker, why = checker_for(version)
    if checker is None:
        raise ValueError(f"{version.name} {version.version} cannot classify answers: {why}")
    session = ModelSession(entry.base_model)
    session.load()
    session.load_adapter(adapter)
    tokenizer = session.tokenizer

    def grounded(messages: list[dict]) -> list[dict]:
        kept = ground(messages, version.name, version.version, tokenizer=tokenizer, shelf=shelf)
        return kept[0]

    answerer = open_answerer(session, engine, [adapter], batch_size=8)
    settings = GenerationSettings(max_new_tokens=answer_tokens)
    try:

        def answers(conversations_in: list[list[dict]]) -> list[str]:
            ids = encode_chats(tokenizer, conversations_in)
            return [g.text for g in answerer.answer(ids, [adapter], settings)[adapter]]

        firsts = answers(
            [grounded([{"role": "user", "content": c["first"]}]) for c in conversations]
        )
        talks = [
            [
                {"role": "user", "content": c["first"]},
                {"role": "assistant", "content": first},
                {"role": "user", "content": c["second"]},
            ]
            for c, first in zip(conversations, firsts, strict=True)
        ]
        alone = answers([[grounded(t[-1:])[0], *t] for t in talks])  # its system message
        read = answers([grounded(t) for t in talks])
        label = answerer.label
    finally:
        answerer.close()
    counts: dict[str, Counter] = {}
    for c, talk, said_alone, said_read in zip(conversations, talks, alone, read, strict=True):
        n = counts.setdefault(c["kind"], Counter())
        n["conversations"] += 1
        for how, said, question in (
            ("alone", said_alone, c["second"]),
            ("as grounding reads it", said_read, asked_in(version, talk).text),
        ):
            n[f"answer of the needed intent, {how}"] += (
                checker.answers.predict([said])[0] == c["second_intent"]
            )
            sent = check_answer(question, said, version.name, version.version, shelf=shelf)
            n[f"checked answer of the needed intent, {how}"] += sent.outcome != "handed off" and (
                checker.answers.predict([sent.text])[0] == c["second_intent"]
            )
            n[f"handed off, {how}"] += sent.outcome == "handed off"
    out = {kind: dict(counts[kind]) for kind in KINDS if kind in counts}
    return {"engine": label, "knowledge": f"{version.name} {version.version}", "kinds": out}


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
    p.add_argument("--adapter", help="also count this adapter's answers, grounded in its own "
                   "knowledge (the demo's default adapter, say)")  # fmt: skip
    p.add_argument("--engine", default="auto", choices=("auto", "llama.cpp", "pytorch"))
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    args = p.parse_args(argv)
    from knowledge.store import LATEST, KnowledgeShelf

    try:
        conversations = read_conversations(args.conversations)
        answered = (
            answer_measure(args.adapter, conversations, args.engine) if args.adapter else None
        )
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
        print(json.dumps({**results, **({"answers": answered} if answered else {})}, indent=2))
        return 0
    if answered:
        print(
            f"{args.adapter}'s answers ({answered['engine']}, grounded in {answered['knowledge']})"
        )
        for kind, n in answered["kinds"].items():
            print(f"  {kind} ({n['conversations']})")
            for what in ("answer of the needed intent", "checked answer of the needed intent",
                         "handed off"):  # fmt: skip
                alone, read = n[f"{what}, alone"], n[f"{what}, as grounding reads it"]
                print(f"    {what:36} alone {alone:>3}  as grounding reads it {read:>3}")
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
