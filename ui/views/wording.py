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
        "; rename the file's columns to one of these (the Train and Evaluate tabs map no others)",
    ),
    # eval/scoring_rows.py: a golden prompts file with no prompt (the Evaluate tab)
    (
        "or leave the golden prompts out (--no-golden)",
        "or untick Check the golden prompts",
    ),
    # finetune/data/pipeline.py: every row longer than the max length
    ("raise --max-length or", "raise Max length (tokens) under Advanced, or"),
    # finetune/config.py: a preference run with no adapter to start from
    (
        "name the adapter to start from (--from-adapter)",
        "name the adapter to start from in Start from adapter (DPO / CPO / ORPO), under Advanced",
    ),
    # finetune/data/helpdesk.py, finetune/data/transcripts.py: the helpdesk import
    (
        "or name them with --column-map ticket=...,role=...,text=...",
        "or name them in the Column map box (ticket=...,role=...,text=...)",
    ),
    ("(map it with --role-map VALUE=user)", "(map it in the Role map box: VALUE=user)"),
    ("or use --format jsonl for JSON lines", "or save JSON lines as a .jsonl file"),
    # knowledge/actions.py: deleting unconfirmed
    (
        "confirm it (--yes, or tick the box)",
        "confirm it (tick Delete the chosen version for good)",
    ),
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
    # adapters/shelf/alias_rules.py: a gate checked on other grounding than the alias serves
    (
        re.compile(r"\(python -m eval --grounding off\)"),
        "(the Evaluate tab, Grounding: off)",
    ),
    (
        re.compile(r"\(python -m eval --knowledge ([^\s()]+)\)"),
        r"(the Evaluate tab, Grounding: on, Ground in: \1)",
    ),
    # adapters/shelf/alias_rules.py, aliases.py: a version or an alias that is not there
    ("(`python -m adapters list` shows them)", "(the shelf above lists them)"),
    ("; `python -m adapters alias list` shows them", "; the Alias list holds them"),
    (
        re.compile(r"create it with `python -m adapters alias set \S+ (\S+)`"),
        r"create it: type a split (`\1`) and press **Set split**",
    ),
    # adapters/shelf_actions.py: renaming or deleting a version an alias serves
    (
        "(python -m adapters alias set ALIAS OTHER=100, or the Adapters tab's aliases)",
        "(under Aliases below: pick the alias, type a split such as `OTHER=100` and press "
        "**Set split**)",
    ),
    # feedback/review.py: an export under a name whose files exist (the Review tab)
    (
        re.compile(r" \(python -m feedback export --overwrite replaces (it|them)\)"),
        r", or tick Overwrite to replace \1",
    ),
    # feedback/review.py: an export of accepted ratings spelling a control token
    (
        "(the Review tab, or python -m feedback review ID --correction TEXT | --intent LABEL | "
        "--drop)",
        "(click its row, then Save correction, Save intent or Drop)",
    ),
    # adapters/shelf/adapter_folder.py, store.py: an adapter the shelf lacks, named with its
    # folder (or the shelf's) on the server
    (
        re.compile(r"(no adapter named '[^']*' on the shelf) \([^()]* does not exist\)"),
        r"\1: pick one it holds",
    ),
    (
        re.compile(r"(no adapter named '[^']*') in .+adapters$"),
        r"\1 on the shelf: pick one it holds",
    ),
    # adapters/shelf_actions.py: Delete with its box unticked (the Adapters tab)
    (
        "Tick the confirmation box first.",
        'Tick "Yes, delete this adapter for good" first; nothing was deleted.',
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
