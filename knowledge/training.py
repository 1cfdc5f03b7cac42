"""A training run's past answers on the shelf: its training split's question/answer pairs.

Only the rows the adapter trains on go there, never the evaluation split: an answer the
evaluation scores must not be among the passages the bot is shown. One version per dataset
fingerprint (the fingerprint names the rows, the mapping and the split), so training twice
on the same data reuses the version.
"""

from __future__ import annotations

import re
from pathlib import Path

from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf, Version


def knowledge_name(data_path: str) -> str:
    """``answers-<dataset file stem>``, as a valid knowledge base name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(data_path)).stem).strip("-._") or "data"
    return f"answers-{stem}"[:64]


def shelve_pairs(
    questions: list[str],
    answers: list[str],
    *,
    dataset_fingerprint: str,
    data_path: str,
    shelf: KnowledgeShelf | None = None,
) -> Version:
    """Put question/answer pairs on the shelf as past answers (one version per fingerprint).

    Args:
        questions: the customers' questions of the training split.
        answers: the answers, row-aligned with ``questions``.
        dataset_fingerprint: the prepared data's fingerprint; a version holding it is reused.
        data_path: the dataset's path (names the knowledge base and each passage's source).

    Raises:
        ValueError: no pair with an answer.
    """
    shelf = shelf or KnowledgeShelf()
    name = knowledge_name(data_path)
    found = shelf.find(name, dataset_fingerprint=dataset_fingerprint)
    if found is not None:
        return found
    source = Path(str(data_path)).name
    passages = [
        Passage((q or "")[:120] or a[:80], a, f"{source}:train row {i}", "past_answer", q or "")
        for i, (q, a) in enumerate(zip(questions, answers, strict=True), start=1)
        if isinstance(a, str) and a.strip()
    ]
    version, _ = shelf.add(
        name,
        passages,
        [source],
        replace=True,
        extra={"dataset_fingerprint": dataset_fingerprint, "split": "train"},
    )
    return version
