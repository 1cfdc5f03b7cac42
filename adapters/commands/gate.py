"""`python -m adapters gate NAME`: show or edit an adapter's release gate rules and its status.

    python -m adapters gate demo                               # rules and the recorded verdict
    python -m adapters gate demo --set golden_all_pass=true    # edit a rule (repeatable)
    python -m adapters gate demo --set slices_not_worse=bleu,rouge_l
    python -m adapters gate demo --set floors.right_intent_min=0.9 --set floors.invented_max=0
    python -m adapters gate demo --set handoff_intents=contact_human_agent,complaint
    python -m adapters gate demo --reset                       # back to the defaults

Changing the rules makes the adapter "not evaluated" until the next evaluation checks them.
"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("name", help="the adapter on the shelf")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="RULE=VALUE",
        help="change a rule: slices_not_worse=bleu,rouge_l,perplexity (or none), "
        "golden_not_worse=true|false, golden_all_pass=true|false, "
        "perplexity_not_worse=true|false, floors.NAME=NUMBER|none (right_intent_min, "
        "intent_min, handoff_min, invented_contact_max, invented_max, leaks_max), "
        "handoff_intents=a,b|none, handoff_phrases=a,b|none",
    )
    p.add_argument("--reset", action="store_true", help="write the default rules")
    p.add_argument("--json", action="store_true", help="rules and status as JSON")


def main(args) -> int:
    from adapters.shelf.gate_rules import (
        DEFAULT_RULES,
        GATE_FILE,
        entry_status,
        parse_setting,
        read_rules,
        write_rules,
    )
    from adapters.shelf.store import BrokenAdapterError, Shelf

    shelf = Shelf()
    entry = shelf.get(args.name)
    if not entry.ok:
        raise BrokenAdapterError(f"adapter {args.name!r} is broken: {entry.reason}")
    changes, floors = {}, {}
    for setting in args.set:  # every bad setting before any write
        key, value = parse_setting(setting)
        if key == "floors":
            floors.update(value)  # one floor per --set: they add up
        else:
            changes[key] = value
    if args.reset or changes or floors:
        rules = dict(DEFAULT_RULES) if args.reset else read_rules(entry.path)
        write_rules(entry.path, {**rules, **changes, "floors": {**rules["floors"], **floors}})
    rules, status = read_rules(entry.path), entry_status(shelf.get(args.name))
    if args.json:
        print(
            json.dumps(
                {
                    "rules": rules,
                    "state": status.state,
                    "reasons": status.reasons,
                    "floors": status.floors,
                    "eval_id": status.eval_id,
                    "date": status.date,
                },
                indent=2,
            )
        )
        return 0
    where = entry.path / GATE_FILE
    print(f"rules ({where if where.exists() else 'defaults: no ' + GATE_FILE + ' yet'}):")
    for key, value in rules.items():
        print(f"  {key:22s} {json.dumps(value)}")
    print(status.sentence(args.name))
    return 0
