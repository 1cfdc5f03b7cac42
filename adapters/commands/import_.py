"""`python -m adapters import PATH [--name NAME]`: copy a PEFT LoRA adapter onto the shelf.

PATH is a folder holding ``adapter_config.json`` or a .zip of one; zips are checked for
unsafe paths, links and bombs before anything is extracted (``adapters.shelf.safe_zip``).
"""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("path", help="adapter folder or .zip")
    p.add_argument("--name", help="name on the shelf (default: from the file or folder name)")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="accept adapter_model.bin and convert it to safetensors (pickles can run code)",
    )


def main(args) -> int:
    from adapters.shelf_actions import import_adapter

    sentence, _ = import_adapter(args.path, args.name, allow_pickle=args.allow_pickle)
    print(sentence)
    return 0
