"""A training run's past answers on the shelf: its training split's question/answer pairs.

Only the rows the adapter trains on go there, never the evaluation split: an answer the
evaluation scores must not be among the passages the bot is shown. One version per dataset
fingerprint (the fingerprint names the rows, the mapping and the split), so training twice
on the same data reuses the version. A new version keeps what was imported into the knowledge
base beside the past answers (the articles of docs/knowledge.md's "When a policy changes"):
only the earlier training split is replaced.
"""

from __future__ import annotations

import re
from pathlib import Path

from knowledge import index
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf, Version

_TRAIN_ROW = re.compile(r":train row \d+$")  # a passage shelve_pairs put there


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
    intents: list | None = None,
) -> Version:
    """Put question/answer pairs on the shelf as past answers (one version per fingerprint).

    Args:
        questions: the customers' questions of the training split.
        answers: the answers, row-aligned with ``questions``.
        dataset_fingerprint: the prepared data's fingerprint; a version holding it is reused.
        data_path: the dataset's path (names the knowledge base and each passage's source).
        intents: each pair's labelled intent (None: unlabelled), row-aligned; kept with the
            past answers for the check before an answer is sent (``knowledge.answer_check``).

    Raises:
        ValueError: no pair with an answer.
    """
    shelf = shelf or KnowledgeShelf()
    name = knowledge_name(data_path)
    labelled = intents is not None and any(y is not None for y in intents)
    found = shelf.find(name, dataset_fingerprint=dataset_fingerprint)
    # A version made before past answers kept intents is made again with them (a new version;
    # the old one stays for whatever was trained or grounded beside it).
    if found is not None and not (labelled and not index.has_intents(found.index_path)):
        return found
    source = Path(str(data_path)).name
    labels = [None] * len(questions) if intents is None else list(intents)
    passages = [
        Passage(
            (q or "")[:120] or a[:80],
            a,
            f"{source}:train row {i}",
            "past_answer",
            q or "",
            "" if y is None else str(y),
        )
        for i, (q, a, y) in enumerate(zip(questions, answers, labels, strict=True), start=1)
        if isinstance(a, str) and a.strip()
    ]
    kept, files = imported(shelf, name)
    version, _ = shelf.add(
        name,
        kept + passages,
        list(dict.fromkeys([*files, source])),
        replace=True,
        extra={"dataset_fingerprint": dataset_fingerprint, "split": "train"},
    )
    return version


def imported(shelf: KnowledgeShelf, name: str) -> tuple[list[Passage], list[str]]:
    """The passages of ``name``'s newest version that an import put there (articles, macros,
    past answers imported by hand), never an earlier training split, and the files they came
    from; nothing when ``name`` has no version."""
    versions = shelf.versions(name)
    if not versions:
        return [], []
    latest = versions[-1]
    kept = [p for _, p in latest.passages_page() if not _TRAIN_ROW.search(p.source)]
    files = [
        f
        for f in latest.sources
        if any(p.source == f or p.source.startswith((f"{f}#", f"{f}:")) for p in kept)
    ]
    return kept, files
