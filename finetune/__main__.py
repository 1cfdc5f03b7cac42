"""`python -m finetune <command>`: training from the command line; each command a module in
``finetune/commands`` with ``add_arguments(parser)`` and ``main(args) -> int``."""

from __future__ import annotations

import sys

from core import cli

COMMANDS: cli.CommandTable = {
    "train": ("finetune.commands.train", "fine-tune a LoRA adapter"),
    "prepare-data": (
        "finetune.commands.prepare_data",
        "load, map, split and tokenize a dataset; print stats",
    ),
    "import-transcripts": (
        "finetune.commands.import_transcripts",
        "helpdesk export -> redacted conversations, split by conversation",
    ),
    "runs": ("finetune.commands.runs", "list supervised training runs and their status"),
    "resolve-model": (
        "finetune.commands.resolve_model",
        "resolve (and cache) a base model; print where it is",
    ),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if __name__ == "__main__" and argv[:1] == ["train"]:
        from finetune.train.allocator import reexec_with_tcmalloc
        from finetune.train.priority import yield_cpu_to_serving

        try:
            yield_cpu_to_serving()  # serving goes first on shared cores: finetune/train/priority.py
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        reexec_with_tcmalloc("finetune", argv)  # training memory: see finetune/train/allocator.py
    return cli.run("python -m finetune", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
