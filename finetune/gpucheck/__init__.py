"""``python -m finetune gpu-check``: the suite (``suite``) and its rows (``rows``)."""
