"""`python -m adapters export NAME [--merged] [--out PATH]`: a .zip of the adapter, or the
base model with the adapter merged in (safetensors + tokenizer)."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("name", help="adapter name on the shelf")
    p.add_argument(
        "--merged", action="store_true", help="write a merged full model instead of a zip"
    )
    p.add_argument("--out", help="where to write (default: under $TUNEDESK_HOME/exports)")
    p.add_argument(
        "--no-overwrite",
        action="store_true",
        help="with --merged: refuse if the output folder exists (the tab overwrites)",
    )


def main(args) -> int:
    from adapters.shelf_actions import export_merged, export_zip

    if args.merged:
        sentence, _ = export_merged(args.name, args.out, overwrite=not args.no_overwrite)
    else:
        sentence, _ = export_zip(args.name, args.out)
    print(sentence)
    return 0
