"""The intent one answer addresses, for Chat and Compare: the evaluation's classifier, fitted on
an adapter's training data file once per file version (kept for the last few files)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from eval.checks.intent import IntentClassifier, fit
from eval.checks.support import file_rows


@lru_cache(maxsize=4)
def _fitted(path: str, stamp: tuple) -> tuple[IntentClassifier | None, str]:
    """(classifier, "") or (None, why not); ``stamp`` (mtime, size) refits an edited file."""
    try:
        rows, column = file_rows(path, None)
    except (ValueError, OSError) as err:
        return None, f"{Path(path).name} cannot be read ({' '.join(str(err).split())})"
    if column is None:
        return None, f"{Path(path).name} has no intent column (intent, category, tag or label)"
    try:
        return fit(rows["response"], rows["label"]), ""
    except ValueError as err:
        return None, f"{Path(path).name}'s `{column}` column cannot train a classifier: {err}"


def classifier_for(data: str | None) -> tuple[IntentClassifier | None, str]:
    """The classifier fitted on the answers of ``data`` (a dataset file), or None and a sentence."""
    if not data:
        return None, "no training data is recorded"
    path = Path(data)
    if not path.is_file():
        return None, f"its training data {data} is not on this machine"
    info = path.stat()
    return _fitted(str(path.resolve()), (info.st_mtime_ns, info.st_size))


def addressed(texts: list[str], data: str | None) -> tuple[list[str], str]:
    """The intent each text addresses by the classifier of ``data``, or ``([], why not)``."""
    classifier, why = classifier_for(data)
    if classifier is None:
        return [], why
    return classifier.predict(texts), ""
