"""`python -m bench policy-change`: does the bot tell a changed policy once its article does?

The demo help center's refund article is changed (refunds within 30 days of delivery become
60 days) and put beside the adapter's own past answers (the knowledge version it was trained
beside, whose answers say 30) in two knowledge versions: the article labelled with its intent
(``<!-- intent: check_refund_policy -->``, as the demo help center has it) and not labelled.
Each grounds the adapter's answers to :data:`QUESTIONS`, refund-policy questions written here
(not in the demo data); the answers that say the new figure and the old one are counted.

    python -m bench policy-change --adapter demo-default-97 [--engine auto] [--json]

Nothing on the shelf changes: the two knowledge bases are made and deleted here, and the
evaluations are not saved to the adapter.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HELP_CENTER = REPO / "assets" / "demo_help_center.md"
OLD, NEW = "within 30 days of delivery", "within 60 days of delivery"
LABEL = "<!-- intent: check_refund_policy -->"
# each question's reference: what a right answer says (its length caps the answers' length)
REFERENCE = (
    "Most items are eligible for a full refund within 60 days of delivery. Items must be unused "
    "and returned in their original packaging. Refunds are issued to the original payment "
    "method once the return is inspected."
)
QUESTIONS = [
    "What is your refund policy?",
    "How long do I have to return something for a refund?",
    "Can I still get my money back three weeks after delivery?",
    "how many days do i have to send stuff back",
    "Is there a time limit on refunds?",
    "what's the return window for a refund at your store",
    "Before ordering, I'd like to know how refunds work.",
    "Do you refund items returned after a month?",
    "explain the refund rules please",
    "If I change my mind, how long can I wait before returning it?",
    "Can you tell me the deadline for returning an item for a refund?",
    "Is a refund possible 45 days after my parcel arrived?",
    "what are the conditions to get a full refund",
    "hey what's ur money back policy",
    "How long after delivery are items eligible for a refund?",
    "I bought a lamp five weeks ago, am I still inside the refund period?",
    "Could you walk me through your returns and refunds policy?",
    "Until when can I return my order and be refunded?",
    "do sale items get refunded?",
    "What's the maximum number of days to ask for a refund?",
]


def changed_articles(labelled: bool) -> str:
    """The demo help center with the refund article's new figure, labels kept or dropped."""
    text = HELP_CENTER.read_text(encoding="utf-8")
    if OLD not in text or LABEL not in text:
        raise ValueError(f"{HELP_CENTER} no longer says {OLD!r} under {LABEL}")
    text = text.replace(OLD, NEW)
    if not labelled:
        text = re.sub(r"^<!-- intent: \S+ -->\n\n", "", text, flags=re.MULTILINE)
    return text


def says(answer: str, days: int) -> bool:
    return re.search(rf"\b{days}\b", answer) is not None


def adapter_knowledge(adapter: str):
    """``(entry, version)``: the adapter on the shelf and the knowledge version it was trained
    beside.

    Raises:
        ValueError: no such adapter, or one trained beside no knowledge version.
    """
    from adapters.shelf.store import Shelf
    from knowledge.store import LATEST, KnowledgeShelf

    entry = Shelf().get(adapter)
    if not entry.ok:
        raise ValueError(f"adapter {adapter!r}: {entry.reason}")
    own = (entry.manifest or {}).get("knowledge") or {}
    if not own.get("name"):
        raise ValueError(f"{adapter} was trained beside no knowledge version (no past answers)")
    return entry, KnowledgeShelf().get(own["name"], own.get("version") or LATEST)


def measure(adapter: str, engine: str = "auto") -> dict:
    """Per version (labelled, not labelled): answers saying 60, saying 30, shown the article."""
    from eval.run import evaluate
    from inference.session import ModelSession
    from knowledge.importers import read_passages
    from knowledge.store import KnowledgeShelf

    entry, own = adapter_knowledge(adapter)
    books = KnowledgeShelf()
    past = own.passages_page()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tunedesk-policy-") as tmp:
        data = Path(tmp) / "policy_questions.jsonl"
        rows = [
            {"instruction": q, "intent": "check_refund_policy", "response": REFERENCE}
            for q in QUESTIONS
        ]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        session = ModelSession(entry.base_model)
        for label, labelled in (("labelled", True), ("not labelled", False)):
            article_file = Path(tmp) / label.replace(" ", "-") / "demo_help_center.md"
            article_file.parent.mkdir()
            article_file.write_text(changed_articles(labelled), encoding="utf-8")
            articles = read_passages(article_file)
            name = f"bench-policy-{label.replace(' ', '-')}"
            version, _ = books.add(
                name, [p for _, p in past] + articles, [own.name, "demo_help_center.md"]
            )
            refund_ids = {i for i, p in version.articles_of("check_refund_policy")} or {
                i for i, p in version.passages_page() if p.kind == "article" and NEW in p.text
            }
            try:
                report = evaluate(
                    session, [adapter], str(data), max_samples=len(rows),
                    use_validation_split=False, golden=None, save=False,
                    grounding="on", knowledge=name, engine=engine,
                )  # fmt: skip
            finally:
                books.delete(name)
            answers = [s["grounded"]["answers"][adapter] for s in report.samples]
            shown = [sum(s["grounded"]["passages"].values(), []) for s in report.samples]
            results[label] = {
                "questions": len(answers),
                "say_new": sum(says(a, 60) for a in answers),
                "say_old": sum(says(a, 30) for a in answers),
                "shown_the_article": sum(bool(refund_ids & set(ids)) for ids in shown),
                "engine": (report.settings.get("engine") or {}).get("label", "pytorch"),
            }
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench policy-change",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--adapter", required=True, help="an adapter trained on the demo data")
    p.add_argument("--engine", default="auto", choices=("auto", "llama.cpp", "pytorch"))
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    args = p.parse_args(argv)
    try:
        results = measure(args.adapter, args.engine)
    except (ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"answered by {next(iter(results.values()))['engine']}")
    print(f"{'the changed article':20} {'say 60 days':>12} {'say 30 days':>12} {'shown it':>9}")
    for label, r in results.items():
        n = r["questions"]
        print(
            f"{label:20} {r['say_new']:>7} / {n:<3} {r['say_old']:>7} / {n:<3} "
            f"{r['shown_the_article']:>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
