"""The data pipeline: read a dataset, check it, map its columns, format and tokenize it.

``load`` reads a file, folder or Hub id behind the guards in ``checks``; ``rows`` maps columns
to prompt/response; ``format`` applies the chat template and masks the prompt; ``pipeline``
splits, fingerprints and saves the prepared rows; ``collate`` builds padded or packed batches.
The names callers use are re-exported here, so ``from finetune.data import prepare`` works.
"""

_EXPORTS = {
    "DataError": "load",
    "load_rows": "load",
    "ColumnMapping": "rows",
    "detect_mapping": "rows",
    "PreparedData": "pipeline",
    "fingerprint": "pipeline",
    "load_prepared": "pipeline",
    "prepare": "pipeline",
    "save_prepared": "pipeline",
    "split": "pipeline",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # Lazy, so that `finetune.data.load` (file checks in the UI) does not import torch, which
    # `pipeline` does through `collate`.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"finetune.data.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
