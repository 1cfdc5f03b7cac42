"""The engine's sentences as the tabs show them. Where a sentence says which command-line flag
to give, the tab names its own control instead, or what to change in the data where it has
none (the Train tab maps no columns). The CLI keeps the flag's wording. No gradio here."""

from __future__ import annotations

import re

# (what the engine says for the CLI, what a tab says instead); tests/ui/views/test_wording.py
# raises each sentence through the tab that shows it, so a reworded one fails there.
_FOR_UI = (
    # finetune/data/rows.py: a dataset whose columns are not a known pair
    (
        ", or name them with --prompt-column and --response-column",
        "; rename the file's columns to one of these (the Train tab maps no others)",
    ),
    # finetune/data/pipeline.py: every row longer than the max length
    ("raise --max-length or", "raise Max length (tokens) under Advanced, or"),
    # finetune/data/helpdesk.py, finetune/data/transcripts.py: the helpdesk import
    (
        "or name them with --column-map ticket=...,role=...,text=...",
        "or name them in the Column map box (ticket=...,role=...,text=...)",
    ),
    ("(map it with --role-map VALUE=user)", "(map it in the Role map box: VALUE=user)"),
    ("or use --format jsonl for JSON lines", "or save JSON lines as a .jsonl file"),
    # knowledge/actions.py: deleting unconfirmed
    ("confirm it (--yes, or tick the box)", "confirm it (tick the box)"),
    # adapters/shelf/alias_rules.py: the Aliases tab's override
    (
        "an override (--force) needs a reason saying why (--reason TEXT)",
        "an override (Override the release gate) needs a reason saying why (Reason for the "
        "override)",
    ),
    (
        "evaluate it (python -m eval), or override with --force --reason TEXT "
        '(API: "force": true, "reason")',
        "evaluate it (the Evaluate tab), or tick Override the release gate and give a reason",
    ),
    # adapters/shelf/aliases.py: a change to an alias that has no split yet
    (
        re.compile(r"give it versions, e\.g\. `python -m adapters alias set \S+ VERSION=100`"),
        "give it versions first: type a split (`VERSION=100`) and press **Set split**",
    ),
)


def for_ui(text: str) -> str:
    """``text`` with each CLI instruction of the engine's put as the tabs' own."""
    for cli, ui in _FOR_UI:
        text = cli.sub(ui, text) if isinstance(cli, re.Pattern) else text.replace(cli, ui)
    return text


def as_markdown(text: str) -> str:
    """Plain ``text`` (a sentence, a list item) for a Markdown component, shown as written:
    Markdown reads a backslash as an escape and drops it, so "no '/', '\\' or '..'" showed as
    "no '/', '' or '..'"."""
    return text.replace("\\", "\\\\")
