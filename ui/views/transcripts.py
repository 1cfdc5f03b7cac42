"""The Train tab's helpdesk import, as plain functions (no gradio): ui/tabs/train.py wires them.

An export is imported into ``$TUNEDESK_HOME/datasets/transcripts/<name>-<hash>/`` (redacted
``train.jsonl``, held-out ``eval.jsonl``, ``import_stats.json``). The raw export is never
copied into the home folder: it holds the personal data the import removes. A refused export
leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path

from core import paths
from core.redact import KINDS
from core.user_text import shown_error
from finetune.data.helpdesk import parse_column_map, parse_role_map
from ui.views.uploads import typed_path
from ui.views.wording import for_ui

EXPORT_TYPES = (".csv", ".tsv", ".jsonl", ".ndjson", ".json")
PREVIEW_HEADERS = ["conversation", "role", "message"]
PREVIEW_CONVERSATIONS = 3


def import_export(
    upload_file,
    typed: str | None,
    column_map: str = "",
    roles: str = "",
    eval_fraction=0.1,
    seed=42,
) -> tuple[str, list[list[str]], str | None, str | None]:
    """Import the uploaded (or typed) export: (summary, preview rows, train.jsonl path, eval.jsonl
    path); a path is None when that file was not written.

    Bad input comes back as a one-sentence summary, no rows and no paths.
    """
    from core.hashing import file_hash
    from finetune.data.transcripts import import_to_folder

    try:
        fraction = _held_out(eval_fraction)  # before reading the export
        src = _source(upload_file, typed)
        folder = paths.subdir("datasets") / "transcripts" / f"{_stem(src)}-{file_hash(src)[:10]}"
        stats = import_to_folder(
            src,
            folder,
            fraction,
            int(seed or 0),
            None,
            parse_column_map(column_map),
            parse_role_map(roles),
        )
    except (ValueError, OSError) as err:
        return f"⚠️ {for_ui(shown_error(err))}", [], None, None
    eval_file = stats.get("eval_file")
    text = summary(stats)
    if eval_file:
        text += f"\n\nHeld-out conversations: `{eval_file}`, now the Evaluate tab's dataset."
    return text, preview_rows(stats["train_file"], eval_file), stats["train_file"], eval_file


def summary(s: dict) -> str:
    """The import's counts as Markdown: conversations, messages, skipped, dropped, redactions."""

    def counts(d: dict, keys=None) -> str:
        keys = keys or list(d)
        return (
            ", ".join(
                f"{d.get(k, 0)} {k.replace('_', ' ')}" for k in keys if d.get(k) or keys is KINDS
            )
            or "none"
        )

    lines = [
        f"**Imported {s['conversations']} conversations ({s['messages']} messages)** from "
        f"{s['tickets']} tickets, {s['rows_read']} rows — {s['conversations_train']} for training, "
        f"{s['conversations_eval']} held out for evaluation (whole conversations).",
        f"- Skipped tickets: {counts(s['skipped'])}",
        f"- Rows left out: {counts(s['rows_skipped'])}",
        f"- Dropped from kept tickets: {counts(s['dropped'])}",
        f"- Redacted: {counts(s['redactions'], KINDS)}",
    ]
    lines += [f"- {for_ui(e)}" for e in s["examples"]]
    lines.append(
        f"\nTraining data: `{s['train_file']}` (now the dataset below). Review the preview: "
        "names typed only in the text, addresses and IBANs are not redacted."
    )
    return "\n".join(lines)


def preview_rows(
    train_file: str, eval_file: str | None, n: int = PREVIEW_CONVERSATIONS
) -> list[list[str]]:
    """The first ``n`` redacted conversations, one row per message."""
    import json

    rows: list[list[str]] = []
    shown = 0
    for f in filter(None, (train_file, eval_file)):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if shown == n:
                    return rows
                conv = json.loads(line)
                rows += [
                    [conv["conversation_id"], m["role"], m["content"][:500]]
                    for m in conv["messages"]
                ]
                shown += 1
    return rows


def _source(upload_file, typed: str | None) -> Path:
    if upload_file:
        src = Path(upload_file if isinstance(upload_file, str) else upload_file.name)
        if src.suffix.lower() not in EXPORT_TYPES:
            raise ValueError(f"{src.name}: upload a helpdesk export ({', '.join(EXPORT_TYPES)})")
        return src
    if (typed or "").strip():
        typed = typed_path(typed)
        src = paths.readable(typed, "the helpdesk export's path")
        if not src.is_file():
            raise ValueError(f"helpdesk export {typed.strip()!r} does not exist or is not a file")
        return src
    raise ValueError("choose a helpdesk export to upload, or type its path")


def _held_out(value) -> float:
    """The "Held out for evaluation" box as a fraction (blank: 0), said by its label when it is
    out of range (the box has no minimum of Gradio's own, which answered a bare "Error").

    Raises:
        ValueError: not a number, or not at least 0 and below 1.
    """
    try:
        fraction = float(value or 0)
    except (TypeError, ValueError):
        fraction = None
    if fraction is None or not 0 <= fraction < 1:
        raise ValueError(f"held out for evaluation must be at least 0 and below 1 (got {value})")
    return fraction


def _stem(src: Path) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in src.stem)[:40] or "export"
