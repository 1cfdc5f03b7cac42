"""Training rows with passages: each row's best past answers in its system message.

With ``DataArgs.with_passages = N`` the training split's question/answer pairs are indexed
(a knowledge version on a temporary shelf, built by :func:`knowledge.training.shelve_pairs`
as the one training puts beside the adapter) and every row, of the training and the
validation split alike, is shown the best N of them for its question, its own answer left
out: the adapter learns to adapt a neighbour's answer to this customer's question. The
system message is built by :func:`knowledge.grounding.ground`, the function grounded
serving uses, so training and serving prompts match. The validation split is never indexed.

With ``DataArgs.passage_share`` below 1, only that share of the training rows is shown
passages (which ones is fixed by the data seed and the row's text, :func:`shown_passages`);
the others train on the question alone, as an adapter trained without passages does. Every
validation row is shown them, as grounded serving shows them.

A row's token limit grows by :data:`PASSAGE_TOKENS` per passage; a row that still does not
fit whole loses its last passage, then the next, before its answer is ever cut.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PASSAGE_TOKENS = 384  # room per passage: a past answer (cut at 1,200 characters) and its question
SERVING_CONTEXT = 2048  # grounded serving's context (a llama-server slot): the limit's ceiling


def token_limit(args) -> int:
    """Most tokens in one example: ``max_length``, plus room for the row's passages."""
    passages = int(getattr(args, "with_passages", 0) or 0)
    if passages <= 0:
        return args.max_length
    return max(args.max_length, min(args.max_length + passages * PASSAGE_TOKENS, SERVING_CONTEXT))


def shown_passages(prompt: str, response: str, seed: int, share: float) -> bool:
    """Whether a training row is among the ``share`` of rows shown passages: a hash of the seed
    and the row's text read as a number in [0, 1), so the same rows are chosen on every run."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    digest = hashlib.blake2b(f"{seed}\x00{prompt}\x00{response}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") / 2**64 < share


class Grounder:
    """Builds a row's system message from one knowledge version, its own answer left out.

    Args:
        shelf: the ``knowledge.store.KnowledgeShelf`` holding ``version``.
        version: the training split's ``knowledge.store.Version``.
        k: passages per row.
        fmt: the run's ``ChatFormat`` (its system prompt and tokenizer).
        limit: the row's token limit (the context the passages share with the row).
    """

    def __init__(self, shelf, version, k: int, fmt, limit: int):
        self.shelf, self.version, self.k, self.fmt, self.limit = shelf, version, k, fmt, limit

    def system(self, prompt: str, response: str, history: str = "", k: int | None = None):
        """``(system message or None, passages shown)`` for one row, with at most ``k`` passages.

        The row's own answer is never among them: any passage whose text is the row's answer
        is left out (the row itself, and any duplicate of it elsewhere in the split).
        """
        from knowledge.grounding import CHARS_PER_TOKEN, ground

        k = self.k if k is None else k
        if k <= 0:
            return None, 0
        own = " ".join((response or "").split())
        messages = self.fmt.messages(prompt, history)
        grounded, grounding = ground(
            messages,
            self.version.name,
            self.version.version,
            k=k,
            context_tokens=self.limit,
            answer_tokens=math.ceil(len(response or "") / CHARS_PER_TOKEN) + 1,
            tokenizer=self.fmt.tokenizer,
            shelf=self.shelf,
            exclude=lambda p: " ".join(p.text.split()) == own,
        )
        if not grounding.shown:
            return None, 0
        return grounded[0]["content"], len(grounding.shown)


@contextmanager
def train_split_grounder(train_raw, args, fmt, fingerprint: str) -> Iterator[Grounder]:
    """A :class:`Grounder` over the training split's pairs, on a shelf deleted afterwards.

    The temporary version is built as the shelf's own (:func:`knowledge.training.shelve_pairs`,
    same passages, same content fingerprint when no row is dropped); the adapter's manifest
    names the real one, which training writes beside the adapter.
    """
    from knowledge.store import KnowledgeShelf
    from knowledge.training import shelve_pairs

    with tempfile.TemporaryDirectory(prefix="tunedesk-passages-") as folder:
        shelf = KnowledgeShelf(Path(folder))
        version = shelve_pairs(
            list(train_raw["prompt"]),
            list(train_raw["response"]),
            dataset_fingerprint=fingerprint,
            data_path=str(args.path),
            shelf=shelf,
            intents=list(train_raw["intent"])
            if "intent" in getattr(train_raw, "column_names", ())
            else None,
        )
        yield Grounder(shelf, version, int(args.with_passages), fmt, token_limit(args))


def encode_grounded(batch: dict, fmt, args, grounder: Grounder, share: float = 1.0) -> dict:
    """:meth:`ChatFormat.encode_batch` on rows shown their passages, plus a ``passages`` count.

    Only the ``share`` of rows that :func:`shown_passages` picks is shown them; the rest are
    encoded without (``passages`` 0). A row that does not fit whole (status other than ``ok``)
    with its passages is encoded again with one passage fewer, down to none: the passages give
    way before the answer.
    """
    n = len(batch["prompt"])
    rows = list(zip(batch["prompt"], batch["response"], batch["history"], strict=True))
    seed = getattr(args, "seed", 0)
    shown = [
        grounder.system(p, r, h) if shown_passages(p, r, seed, share) else (None, 0)
        for p, r, h in rows
    ]
    systems, counts = [s for s, _ in shown], [c for _, c in shown]
    limit, last_only = token_limit(args), getattr(args, "last_turn_only", False)
    out = fmt.encode_batch({**batch, "system": systems}, limit, args.truncation, last_only)
    retry = [i for i in range(n) if counts[i] and out["status"][i] != "ok"]
    while retry:
        for i in retry:
            systems[i], counts[i] = grounder.system(*rows[i], k=counts[i] - 1)
        again = fmt.encode_batch(
            {
                "prompt": [rows[i][0] for i in retry],
                "response": [rows[i][1] for i in retry],
                "history": [rows[i][2] for i in retry],
                "system": [systems[i] for i in retry],
            },
            limit,
            args.truncation,
            last_only,
        )
        for j, i in enumerate(retry):
            for key in ("input_ids", "labels", "length", "status"):
                out[key][i] = again[key][j]
        retry = [i for i in retry if counts[i] and out["status"][i] != "ok"]
    return {**out, "passages": counts}
