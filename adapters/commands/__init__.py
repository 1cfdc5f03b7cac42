"""The subcommands of `python -m adapters` (see adapters/__main__.py)."""
