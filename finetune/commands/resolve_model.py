"""`python -m finetune resolve-model NAME`: resolve and cache a base model."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", default="default", help="Hub id, local folder, or 'default'")


def main(args) -> int:
    from core.models import resolve

    print(json.dumps(resolve(args.name).to_dict(), indent=2))
    return 0
