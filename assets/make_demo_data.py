#!/usr/bin/env python3
"""Build TuneDesk's synthetic customer-support demo data (pure standard library).

Writes three files into ``--out-dir`` (default: this folder):

* ``demo_support.jsonl``: instruction/response pairs in the Bitext column layout
  (``flags``, ``instruction``, ``category``, ``intent``, ``response``);
* ``golden.jsonl``: hand-written held-out prompts with phrases a good answer must (not) contain;
* ``demo_help_center.md``: the demo shop's help-center articles, one section per intent (labelled
  with it) holding its steps and tips (what the answers explain, without the greetings), for the
  knowledge shelf.

Every row is composed here from the wording in ``demo_wording.py``; nothing is copied from a
third-party set.
The output depends only on ``--seed``: running it twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from demo_wording import (
    ARTICLE_TITLES,
    CLOSERS,
    CLOSINGS,
    GOLDEN,
    INTENTS,
    LEADS,
    NEVER_SAY,
    OPENERS,
)

ROWS_PER_INTENT = 92
FIELDS = ("flags", "instruction", "category", "intent", "response")
REQUIRED_PLACEHOLDERS = (
    "{{Order Number}}",
    "{{Account Type}}",
    "{{Refund Amount}}",
    "{{Invoice Number}}",
    "{{Customer Support Phone Number}}",
    "{{Website URL}}",
    "{{Online Company Portal Info}}",
    "{{Delivery City}}",
)
# The group makes re.split() keep each placeholder, at the odd indexes of its result.
PLACEHOLDER = re.compile(r"(\{\{[^{}]+\}\})")
WORD = re.compile(r"[A-Za-z]{4,}")
POLITE = re.compile(r"\b(please|pls|thanks|thank you|thx|could you|kindly)\b")
COLLOQUIAL_WORDS = re.compile(r"\b(wanna|gonna|gotta|u|ur|pls|thx|asap|yo|dont|cant|im|whats)\b")
COLLOQUIAL = [  # applied in this order, outside placeholders only
    (re.compile(r"\bwant to\b", re.I), "wanna"),
    (re.compile(r"\bhave to\b", re.I), "gotta"),
    (re.compile(r"\byour\b", re.I), "ur"),
    (re.compile(r"\byou\b", re.I), "u"),
    (re.compile(r"\bplease\b", re.I), "pls"),
    (re.compile(r"\bthanks\b", re.I), "thx"),
    (re.compile(r"\bdon't\b", re.I), "dont"),
    (re.compile(r"\bcan't\b", re.I), "cant"),
    (re.compile(r"\bI'm\b", re.I), "im"),
    (re.compile(r"\bwhat's\b", re.I), "whats"),
]


@dataclass
class Intent:
    name: str
    category: str
    keys: list[str]
    asks: list[str] = field(default_factory=list)
    acks: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    tips: list[str] = field(default_factory=list)


def parse_intents(text: str) -> list[Intent]:
    intents: list[Intent] = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        if line.startswith("== "):
            head, keys = line[3:].split(" | ")
            name, category = head.split()
            intents.append(Intent(name, category, [k.strip() for k in keys.split(";")]))
            continue
        kind, _, body = line.partition(": ")
        if kind == "ask":
            intents[-1].asks.extend(part.strip() for part in body.split(" | "))
        elif kind in ("ack", "step", "tip"):
            getattr(intents[-1], kind + "s").append(body)
        else:
            raise ValueError(f"bad table line: {line!r}")
    return intents


def on_text(text: str, fn) -> str:
    """Apply ``fn`` to the text between placeholders, leaving ``{{...}}`` untouched."""
    parts = PLACEHOLDER.split(text)
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(parts))


def colloquial(text: str) -> str:
    for pattern, repl in COLLOQUIAL:
        text = pattern.sub(repl, text)
    return text


def typo(rng: random.Random, word: str) -> str:
    """Swap two adjacent letters, drop one or double one (never the first letter)."""
    op, j = rng.choice(("swap", "drop", "double")), rng.randrange(1, len(word) - 1)
    if op == "swap":
        return word[:j] + word[j + 1] + word[j] + word[j + 2 :]
    if op == "drop":
        return word[:j] + word[j + 1 :]
    return word[: j + 1] + word[j:]


def add_typos(rng: random.Random, text: str) -> str:
    """Put one or two typos into words of 4+ letters outside placeholders."""
    parts = PLACEHOLDER.split(text)
    texts = range(0, len(parts), 2)
    spots = [(i, m.start(), m.end()) for i in texts for m in WORD.finditer(parts[i])]
    if not spots:
        return text
    chosen = rng.sample(spots, min(len(spots), rng.choice((1, 1, 2))))
    for i, start, end in sorted(chosen, reverse=True):  # right to left keeps offsets valid
        parts[i] = parts[i][:start] + typo(rng, parts[i][start:end]) + parts[i][end:]
    return "".join(parts)


def make_instruction(rng: random.Random, template: str) -> tuple[str, str]:
    """Dress a template up as a customer message; return (flags, text)."""
    text, opener, closer = template, rng.choice(OPENERS), rng.choice(CLOSERS)
    if opener:
        text = f"{opener}, {text}"
    if closer in ("?", "!"):
        text = text.rstrip("?!.") + closer
    elif closer:
        sep = ", " if closer.endswith("?") and not text.endswith(("?", "!")) else " "
        text = f"{text}{sep}{closer}"
    flags = {"B"}
    if rng.random() < 0.45:
        text = on_text(text, str.lower)
        flags.add("L")
    else:
        text = text[:1].upper() + text[1:]
    if rng.random() < 0.25:
        text = on_text(text, colloquial)
    if POLITE.search(text.lower()):
        flags.add("P")
    if COLLOQUIAL_WORDS.search(text.lower()):
        flags.add("Q")
    if rng.random() < 0.3:
        typoed = add_typos(rng, text)
        if typoed != text:
            text = typoed
            flags.add("Z")
    return "".join(f for f in "BLPQZ" if f in flags), text


def responses_for(intent: Intent) -> list[str]:
    """Every ack x lead x tip x closing combination, in a fixed order."""
    steps = "\n".join(f"{n}. {step}" for n, step in enumerate(intent.steps, 1))
    return [
        f"{ack} {lead}\n\n{steps}\n\n{tip} {closing}"
        for ack in intent.acks
        for lead in LEADS
        for tip in intent.tips
        for closing in CLOSINGS
    ]


def check_response(intent: Intent, text: str) -> None:
    words, low = len(text.split()), text.lower()
    if not 40 <= words <= 120:
        raise ValueError(f"{intent.name}: response has {words} words:\n{text}")
    missing = [k for k in intent.keys if k not in low]
    if missing or any(bad in low for bad in NEVER_SAY):
        raise ValueError(f"{intent.name}: lacks {missing} or says a banned phrase:\n{text}")


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9{} ]+", " ", text.lower()).split())


def build_golden(intents: list[Intent]) -> list[dict]:
    by_name = {i.name: i for i in intents}
    rows = []
    for n, line in enumerate(filter(None, (raw.strip() for raw in GOLDEN.splitlines())), 1):
        name, prompt, keys = (part.strip() for part in line.split(" | "))
        must = [k.strip() for k in keys.split(";")]
        if name not in by_name or not set(must) <= set(by_name[name].keys):
            raise ValueError(f"golden line {n}: unknown intent or phrase not a key: {line!r}")
        rows.append({"id": f"g{n:02d}", "intent": name, "prompt": prompt,
                     "must_contain": must, "must_not_contain": list(NEVER_SAY)})  # fmt: skip
    return rows


def build_rows(rng: random.Random, intents: list[Intent], blocked: set[str]) -> list[dict]:
    rows: list[dict] = []
    seen: set[str] = set()
    for intent in intents:
        replies = responses_for(intent)
        for reply in replies:
            check_response(intent, reply)
        made = tries = 0
        while made < ROWS_PER_INTENT:
            tries += 1
            if tries > 50 * ROWS_PER_INTENT:
                raise RuntimeError(f"{intent.name}: too few distinct instructions")
            flags, text = make_instruction(rng, rng.choice(intent.asks))
            if text in seen or normalise(text) in blocked:
                continue
            seen.add(text)
            values = (flags, text, intent.category, intent.name, rng.choice(replies))
            rows.append(dict(zip(FIELDS, values, strict=True)))
            made += 1
    rng.shuffle(rows)
    return rows


def help_center(intents: list[Intent]) -> str:
    """The help center as Markdown: a section per intent (category order kept), labelled with
    its intent (``<!-- intent: NAME -->``: the article outranks that intent's past answers),
    its numbered steps, then each tip as a paragraph."""
    out = ["# Demo shop help center", ""]
    for intent in intents:
        steps = [f"{n}. {step}" for n, step in enumerate(intent.steps, 1)]
        label = f"<!-- intent: {intent.name} -->"
        out += [f"## {ARTICLE_TITLES[intent.name]}", "", label, "", *steps, ""]
        for tip in intent.tips:
            out += [tip, ""]
    return "\n".join(out)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    intents = parse_intents(INTENTS)
    golden = build_golden(intents)
    blocked = {normalise(g["prompt"]) for g in golden}
    rows = build_rows(random.Random(args.seed), intents, blocked)

    instructions = {r["instruction"] for r in rows}
    clash = [g["prompt"] for g in golden if g["prompt"] in instructions]
    if clash:
        raise SystemExit(f"golden prompts found among the instructions: {clash}")
    for ph in REQUIRED_PLACEHOLDERS:
        if not all(any(ph in r[col] for r in rows) for col in ("instruction", "response")):
            raise SystemExit(f"placeholder {ph} missing from instructions or responses")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out_dir / "demo_support.jsonl", rows)
    write_jsonl(args.out_dir / "golden.jsonl", golden)
    missing = [i.name for i in intents if i.name not in ARTICLE_TITLES]
    if missing:
        raise SystemExit(f"no help-center article title for {missing}")
    (args.out_dir / "demo_help_center.md").write_text(help_center(intents), encoding="utf-8")

    categories = sorted({i.category for i in intents})
    print(f"wrote {len(rows)} rows, {len(intents)} intents, {len(categories)} categories "
          f"-> {args.out_dir / 'demo_support.jsonl'}")  # fmt: skip
    for cat in categories:
        names = sorted(i.name for i in intents if i.category == cat)
        counts = ", ".join(f"{n}={sum(r['intent'] == n for r in rows)}" for n in names)
        print(f"  {cat}: {counts}")
    typos = sum("Z" in r["flags"] for r in rows)
    print(f"  rows with typos (flag Z): {typos}")
    print(f"wrote {len(golden)} golden prompts -> {args.out_dir / 'golden.jsonl'}")
    print(f"wrote {len(intents)} help-center articles -> {args.out_dir / 'demo_help_center.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
