"""`python -m finetune <command>`: the CLI is a table of commands, each a module in
``finetune/commands`` with ``add_arguments(parser)`` and ``main(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "train": ("finetune.commands.train", "fine-tune a LoRA adapter"),
    "prepare-data": ("finetune.commands.prepare_data", "load, map, split and tokenize a dataset; print stats"),
    "import-transcripts": ("finetune.commands.import_transcripts",
                           "helpdesk export -> redacted conversations, split by conversation"),
    "bench": ("finetune.commands.bench", "measure training throughput over a grid of settings"),
    "runs": ("finetune.commands.runs", "list supervised training runs and their status"),
    "resolve-model": ("finetune.commands.resolve_model", "resolve (and cache) a base model; print where it is"),
    "gpu-check": ("finetune.commands.gpu_check", "smoke-test every CUDA training path on one GPU (a few minutes)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if __name__ == "__main__" and argv[:1] in (["train"], ["bench"]):
        from finetune.train.allocator import reexec_with_tcmalloc

        reexec_with_tcmalloc(argv)  # training memory: see finetune/train/allocator.py
    parser = argparse.ArgumentParser(prog="python -m finetune", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == chosen:  # import only the command being run: the CLI starts fast
            importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return importlib.import_module(args._module).main(args) or 0
    except (ValueError, FileNotFoundError, PermissionError, OSError) as err:
        # Bad input gets one clear sentence, not a traceback.
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
