"""Time to first token along one support chat, with and without reused beginnings:
``python -m bench turns [--turns 8] [--tokens 32] [--write-docs]``.

One conversation with a support system prompt is answered turn by turn through the batching
scheduler (float32, the base model), every turn's prompt holding the whole chat so far. Once
with the prefix cache off (every turn prefilled from the first token), once with it on (turn
1 reuses the system prompt stored by another customer's chat before it, each later turn the
previous turn's stored conversation). Prints a markdown section; ``--write-docs``
appends it to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from inference.generate import GenerationSettings

SYSTEM = (
    "You are the customer support assistant of Northwind Outfitters, an online shop for "
    "outdoor clothing. Answer in two or three friendly sentences. Never ask for card "
    "numbers or passwords. Orders ship within two working days; refunds reach the card "
    "within seven days of the return arriving; exchanges are free within 30 days."
)
TURNS = [
    "Hi, I ordered a blue rain jacket last week and it has not arrived.",
    "The order number is 48213. Can you check where it is?",
    "It says delivered but I never got it. What should I do?",
    "My neighbour does not have it either. Can you send a new one?",
    "If you send a new one, will I be charged again?",
    "OK. And can I change the size to large for the new one?",
    "How long will the new jacket take to arrive?",
    "Can I get a refund instead if it takes too long?",
    "Thanks. One more thing: do you ship to Norway?",
    "Great, that is all. Have a nice day!",
]


def run_chat(scheduler, turns: list[str], tokens: int, system: str = SYSTEM) -> list[dict]:
    """One conversation, turn by turn: per turn its prompt tokens, first-token time, answer."""
    history, rows = [{"role": "system", "content": system}], []
    settings = GenerationSettings(max_new_tokens=tokens)
    for text in turns:
        history.append({"role": "user", "content": text})
        before = scheduler.prefix.status()["reused_tokens"]
        start, first, parts = time.perf_counter(), None, []
        ticket = scheduler.submit(history, None, settings)
        for delta in ticket:
            if first is None and delta:
                first = time.perf_counter()
            parts.append(delta)
        answer = "".join(parts)
        rows.append(
            {
                "prompt": ticket.prompt_tokens,
                "ttft": (first or time.perf_counter()) - start,
                "reused": scheduler.prefix.status()["reused_tokens"] - before,
                "answer": answer,
            }
        )
        history.append({"role": "assistant", "content": answer})
    return rows


def render(off: list[dict], on: list[dict], argv: list[str]) -> str:
    from bench.serving import cpu_model, native_bf16
    from inference.session import physical_cores

    same = sum(a["answer"] == b["answer"] for a, b in zip(off, on, strict=True))
    lines = [
        "## A support chat, turn by turn: reused beginnings (issue 23)",
        "",
        f"- command: `{' '.join(['python -m bench turns', *argv])}`",
        f"- machine: {cpu_model()}, {physical_cores()} physical cores; native bf16: "
        f"{native_bf16()}; the batching scheduler, float32, base model, greedy",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        "| turn | prompt tokens | first token, prefilled whole | first token, reusing | tokens "
        "reused |",
        "|---|---|---|---|---|",
    ]
    for turn, (a, b) in enumerate(zip(off, on, strict=True), start=1):
        lines.append(
            f"| {turn} | {a['prompt']} | {a['ttft'] * 1000:.0f} ms | {b['ttft'] * 1000:.0f} ms "
            f"| {b['reused']} |"
        )
    lines += ["", f"Answers identical with and without reuse: {same}/{len(off)} turns.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from core.cli import DefaultsFormatter

    parser = argparse.ArgumentParser(prog="python -m bench turns", description=__doc__)
    parser.formatter_class = DefaultsFormatter  # each flag's default in --help
    parser.add_argument("--turns", type=int, default=8, help=f"turns of the chat (1-{len(TURNS)})")
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens per turn at most")
    parser.add_argument(
        "--model", default="default", help="base model (default: SmolLM2-135M-Instruct)"
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="append the section to docs/benchmarks-log.md"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.turns <= len(TURNS):
        parser.error(f"--turns must be 1 to {len(TURNS)}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from bench.serving import write_section
    from core import models
    from inference.session import ModelSession
    from serve.batching.scheduler import Scheduler

    session = ModelSession(str(models.resolve(args.model).path), dtype="float32")
    session.load()
    results = []
    for prefix_bytes in (0, None):  # off, then on (its default budget)
        with Scheduler(session, prefix_bytes=prefix_bytes) as scheduler:
            # warm-up, another customer: first-call costs out of turn 1; with reuse on, the
            # system prompt is then stored, as on a server that has answered before
            run_chat(scheduler, ["Do you sell gloves?"], 4)
            results.append(run_chat(scheduler, TURNS[: args.turns], args.tokens))
    text = render(*results, argv)
    print(text)
    if args.write_docs:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
