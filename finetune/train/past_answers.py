"""The training split's question/answer pairs onto the knowledge shelf, beside the adapter.

A newcomer's first adapter is grounded with no extra click: the rows it trained on become the
past answers it may be shown (:func:`knowledge.training.shelve_pairs`, a version per dataset
fingerprint). Only ``prepared.rows_raw["train"]`` is read: the validation split, which the
Evaluate tab scores, never reaches the shelf.
"""

from __future__ import annotations


def shelve_train_split(prepared, data_path: str) -> dict:
    """Put the training split's pairs on the shelf; return the manifest's ``knowledge`` entry.

    Args:
        prepared: the run's ``finetune.data.PreparedData`` (its untokenized ``rows_raw``).
        data_path: the dataset's path, which names the knowledge base.

    Returns:
        ``{"name", "version", "fingerprint", "passages", "split": "train"}``.

    Raises:
        ValueError: the prepared data kept no untokenized training rows.
        OSError: the shelf cannot be written.
    """
    from knowledge.training import shelve_pairs

    rows = (getattr(prepared, "rows_raw", None) or {}).get("train")
    if rows is None or len(rows) == 0:
        raise ValueError("the prepared data holds no training rows to put on the knowledge shelf")
    version = shelve_pairs(
        list(rows["prompt"]),
        list(rows["response"]),
        dataset_fingerprint=prepared.fingerprint,
        data_path=data_path,
        intents=list(rows["intent"]) if "intent" in getattr(rows, "column_names", ()) else None,
    )
    return {
        "name": version.name,
        "version": version.version,
        "fingerprint": version.fingerprint,
        "passages": version.passages,
        "split": "train",
    }


def shelve_or_warn(prepared, data_path: str, emit) -> dict | None:
    """:func:`shelve_train_split`, its failure a ``warning`` event: the adapter is saved anyway."""
    try:
        return shelve_train_split(prepared, data_path)
    except (ValueError, OSError, RuntimeError) as err:
        emit("warning", message=f"the training rows were not put on the knowledge shelf: {err}")
        return None
