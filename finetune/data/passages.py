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

With ``with_passages = "auto"`` (the Train tab's default) the run decides by a measurement on
its own training split (:func:`choose_passages`): one passage (to the ``passage_share`` of rows)
where a row's best past answer already says most of its answer (a team answering from a few
canned macros per intent), none where each answer is written anew (docs/knowledge.md,
"Training with passages").

A row's token limit grows by :data:`PASSAGE_TOKENS` per passage; a row that still does not
fit whole loses its last passage, then the next, before its answer is ever cut.
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

PASSAGE_TOKENS = 384  # room per passage: a past answer (cut at 1,200 characters) and its question
SERVING_CONTEXT = 2048  # grounded serving's context (a llama-server slot): the limit's ceiling
AUTO = "auto"  # with_passages: the run measures its training split and decides (choose_passages)
# "auto" trains with a passage where a row's answer and its best past answer share at least
# this word F1 on average; set between the datasets measured (docs/benchmarks.md, "Grounded
# answers on Bitext, trained with and without passages").
AUTO_MIN_OVERLAP = 0.65
AUTO_ROWS = 400  # training rows measured (the split's first, already shuffled by the seed)


def passages_asked(args) -> int:
    """Passages per row ``args`` may show: ``with_passages``, 1 for ``"auto"`` (the most it
    chooses)."""
    value = getattr(args, "with_passages", 0) or 0
    return 1 if value == AUTO else int(value)


def token_limit(args) -> int:
    """Most tokens in one example: ``max_length``, plus room for the row's passages."""
    passages = passages_asked(args)
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


@dataclass
class PassageChoice:
    """What ``with_passages = "auto"`` chose for one training split, and the measurement."""

    passages: int  # per row: 1 or 0
    overlap: float  # mean word F1 of a row's answer and its best past answer (own left out)
    rows: int  # training rows measured

    def line(self) -> str:
        verdict = (
            f"train with {self.passages} passage per row"
            if self.passages
            else "train without passages"
        )
        return (
            f"passages auto: {verdict} (a row's best past answer shares {self.overlap:.2f} of "
            f"its answer's words on average over {self.rows} training rows; "
            f"{AUTO_MIN_OVERLAP:.2f} or more trains with one)"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _words(text: str) -> Counter:
    return Counter(re.findall(r"\w+", (text or "").lower()))


def word_f1(a: str, b: str) -> float:
    """F1 of the words two texts share (counted with repeats, case folded)."""
    wa, wb = _words(a), _words(b)
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    precision, recall = common / sum(wb.values()), common / sum(wa.values())
    return 2 * precision * recall / (precision + recall)


def choose_passages(version, prompts: list[str], responses: list[str]) -> PassageChoice:
    """Measure how much of each training row's answer its best past answer already says (the
    routed search grounded answers use, the row's own answer left out) and choose 1 passage
    per row at :data:`AUTO_MIN_OVERLAP` or more, else none."""
    from knowledge.routing import routed_search

    scores = []
    for prompt, response in list(zip(prompts, responses, strict=True))[:AUTO_ROWS]:
        own = " ".join((response or "").split())
        hits = routed_search(version, prompt, 3).hits
        best = next((h for h in hits if " ".join(h.passage.text.split()) != own), None)
        scores.append(word_f1(response, best.passage.text) if best is not None else 0.0)
    overlap = sum(scores) / len(scores) if scores else 0.0
    return PassageChoice(int(overlap >= AUTO_MIN_OVERLAP), round(overlap, 3), len(scores))


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
        yield Grounder(shelf, version, passages_asked(args), fmt, token_limit(args))


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
