"""`python -m bench passages-training`: right intent, grounded and not, per adapter.

Answers held-out rows (the adapters' shared validation split and the rows past their
``max_samples``, as ``python -m eval`` picks them, spread over the intents) with each adapter
and the base model, each once shown the best ``k`` passages of the knowledge version the
adapter was trained beside (``knowledge.grounding.ground``, as Chat and ``/v1`` ground) and
once without. The release checks' classifier (fitted on the training data's answers) names the
intent each answer addresses; the table gives how often it is the asked one. Used to choose
between training with passages (``--with-passages``) and training without them, both served
grounded::

    python -m bench passages-training --adapters plain-10m,passages-10m \\
        --data ../shared/datasets/bitext/bitext_v1_train.csv --rows 200
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from eval.checks.answer_intent import addressed
from eval.scoring_rows import select_rows
from inference.generate import GenerationSettings, generate_batch
from inference.session import ModelSession
from knowledge.grounding import ground

BASE = "__base__"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="the base model the adapters were trained on")
    p.add_argument("--adapters", required=True, help="comma-separated shelf adapters to compare")
    p.add_argument("--data", required=True, help="the labelled data file the adapters trained on")
    p.add_argument("--rows", type=int, default=200, help="held-out rows to answer")
    p.add_argument("--k", type=int, default=2, help="passages shown to a grounded answer")
    p.add_argument("--max-new-tokens", type=int, default=256, help="answer length cap")
    p.add_argument("--batch-size", type=int, default=16, help="rows per generate call")
    p.add_argument("--no-base", action="store_true", help="leave the base model out")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args) -> dict:
    """Every (model, grounded?) pair's right-intent rate on the same held-out rows."""
    names = [n.strip() for n in args.adapters.split(",") if n.strip()]
    session = ModelSession(args.model, max_loaded_adapters=max(4, len(names)))
    session.load()
    manifests = {name: session.load_adapter(name).manifest for name in names}
    per_intent = math.ceil(args.rows / 27) + 1  # Bitext's 27 intents; a small file has fewer
    rows = select_rows(
        session.tokenizer,
        manifests,
        args.data,
        args.rows,
        slice_by="intent",
        rows_per_slice=per_intent,
    )
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens)
    results = {"rows": len(rows.prompts), "note": rows.note, "k": args.k, "models": []}
    models = ([] if args.no_base else [BASE]) + names
    for model in models:
        knowledge = (manifests.get(model) or manifests[names[0]]).get("knowledge")
        for grounded in (True, False):
            if grounded and not knowledge:
                continue
            t0 = time.perf_counter()
            answers = _answers(
                session, rows, model, knowledge if grounded else None, args, settings
            )
            named, why = addressed(answers, args.data)
            if not named:
                raise SystemExit(f"no intent classifier: {why}")
            right = sum(n == a for n, a in zip(named, rows.intents, strict=True))
            manifest = manifests.get(model, {})
            results["models"].append(
                {
                    "model": model,
                    "grounded": grounded,
                    "knowledge": f"{knowledge['name']} {knowledge['version']}" if grounded else "",
                    "with_passages": (manifest.get("data") or {}).get("with_passages", 0),
                    "steps": manifest.get("steps"),
                    "right_intent": right / len(named),
                    "right": right,
                    "of": len(named),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
            print(_line(results["models"][-1]), file=sys.stderr, flush=True)
    return results


def _answers(session, rows, model, knowledge, args, settings) -> list[str]:
    config = session.model.config
    # Chat's and /v1's context (a llama-server slot), or a smaller model's own.
    context = min(2048, getattr(config, "max_position_embeddings", None) or 2048)
    conversations = []
    for prompt in rows.prompts:
        messages = [{"role": "user", "content": prompt}]
        if rows.system_prompt:
            messages.insert(0, {"role": "system", "content": rows.system_prompt})
        if knowledge:
            messages, _ = ground(
                messages,
                knowledge["name"],
                knowledge["version"],
                k=args.k,
                tokenizer=session.tokenizer,
                context_tokens=context,
                answer_tokens=args.max_new_tokens,
            )
        conversations.append(messages)
    out = []
    for i in range(0, len(conversations), args.batch_size):
        part = conversations[i : i + args.batch_size]
        out += [a.text for a in generate_batch(session, part, [model] * len(part), settings)]
    return out


def _line(r: dict) -> str:
    how = f"grounded in {r['knowledge']}" if r["grounded"] else "ungrounded"
    return (
        f"{r['model']:<28} {how:<34} with_passages={r['with_passages']} steps={r['steps']} "
        f"right intent {r['right_intent']:.3f} ({r['right']}/{r['of']}) {r['seconds']} s"
    )


def main(args) -> int:
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{results['rows']} held-out rows, k={results['k']}: {results['note']}")
        for r in results["models"]:
            print(_line(r))
    return 0
