"""Which rows an evaluation scores: the adapters' held-out rows, or the first rows of a file.

An adapter has to be scored on rows it did not train on. Its manifest records the
fingerprint of its training split (``finetune.data.fingerprint``: file content, chat
template, tokenizer, max_length, seed, val_fraction, max_samples). The split is rebuilt with
``finetune.data.prepare`` and used only when the fingerprint matches, so another file or
unknown split settings can never pass training rows off as held-out ones; then the first
rows of the file are scored instead and ``EvalRows.note`` says why.

Rows are tokenized once, by the same code training uses: ``examples`` (input_ids, labels)
feed perplexity, and the prompt part of the same ids is what generation continues.

A slice column (``slice_by``: ``intent``, ``category``, any column of the file) travels with
the rows as ``EvalRows.slices``, one label per row, so the report can score each slice;
``rows_per_slice`` keeps at most that many rows of each label (a few rows of every intent
instead of the first rows of the file).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from core.templates import encode_chats
from core.user_text import check_unicode
from finetune.config import DataArgs, RunConfig
from finetune.data import DataError, detect_mapping, load_rows, prepare
from finetune.data.format import IGNORE_INDEX, ChatFormat
from finetune.data.rows import normalize

REPO_ROOT = Path(__file__).resolve().parents[1]
# With no answer cap given, answers may run as long as 95 % of the scored references do (in
# tokens, rounded up to 16, within these bounds). A fixed 128 cut 77 of 100 Bitext answers
# (median reference 151 tokens): BLEU's brevity penalty then scored the cap, not the adapter
# (the same adapter: BLEU 15.9 at 128 tokens, 20.7 at 256; docs/benchmarks.md).
ANSWER_CAP_PERCENTILE = 95
ANSWER_CAP_BOUNDS = (32, 512)
# The columns a run was told (--prompt-column ...): another file of the same columns is read so.
_COLUMN_FIELDS = ("prompt_column", "response_column", "messages_column")


@dataclass
class EvalRows:
    """The rows one evaluation scores, tokenized once."""

    prompts: list[str]  # the user's last message
    references: list[str]  # the expected answer
    intents: list[str | None]
    examples: list[dict]  # input_ids + labels (-100 on the prompt), for perplexity
    prompt_ids: list[list[int]]  # the prompt part of input_ids: what generation continues
    system_prompt: str | None
    held_out: bool  # True: rows none of the adapters trained on
    note: str  # how the rows were chosen, in words
    slice_by: str | None = None  # the column the rows are sliced by
    slices: list[str | None] | None = None  # that column's value per row (None: empty)
    # the columns the rows were read from ({"prompt": ..., "response": ..., "messages": ...}):
    # the support checks read the file again with them
    mapping: dict | None = None


def check_slice_column(data: str, column: str | None) -> None:
    """Refuse, in one sentence, a slice column the data file does not have.

    Raises:
        ValueError: the column is not in the file (the message lists the columns there).
    """
    if not column:
        return
    columns = load_rows(data).column_names
    if column not in columns:
        raise ValueError(
            f"slice column {column!r} is not in {Path(str(data)).name} "
            f"(its columns: {', '.join(columns)})"
        )


def check_columns(data: str, columns: dict | None = None, manifest: dict | None = None) -> None:
    """Refuse, before any model loads, a file whose prompt and response columns cannot be found:
    the ``columns`` named (``prompt_column``, ``response_column``: what ``--prompt-column`` and
    ``--response-column`` give), else the ones ``manifest``'s run was told, else those found by
    their names, as training finds them (:func:`finetune.data.detect_mapping`).

    Raises:
        finetune.data.DataError: a named column is not in the file, or none could be told
            apart (the sentence lists the file's columns).
    """
    ds = load_rows(data)
    told = _told_columns(ds.column_names, columns, ((manifest or {}).get("data") or {}))
    detect_mapping(ds.column_names, DataArgs(path=str(data), **told))


def _told_columns(names: list[str], columns: dict | None, recorded: dict) -> dict:
    """The DataArgs column fields to read a file of columns ``names`` with: the ``columns``
    given (they replace a recorded messages column too), else the ``recorded`` run's where the
    file has them all, else none (found by their names)."""
    if columns:
        return {"messages_column": None, **columns}
    told = {k: recorded.get(k) for k in _COLUMN_FIELDS if isinstance(recorded.get(k), str)}
    return told if set(told.values()) <= set(names) else {}


def select_rows(
    tokenizer,
    manifests: dict[str, dict],
    data: str,
    max_samples: int,
    use_validation_split: bool = True,
    system_prompt: str | None = None,
    slice_by: str | None = None,
    rows_per_slice: int | None = None,
    columns: dict | None = None,
) -> EvalRows:
    """Choose and tokenize the rows to score.

    Args:
        tokenizer: the base model's tokenizer.
        manifests: adapter name -> manifest, in report order.
        data: the dataset file (or folder) to score.
        max_samples: at most this many rows.
        use_validation_split: prefer the adapters' held-out rows when their split is known.
        system_prompt: system message when no adapter recorded one.
        slice_by: a column of the file whose value each row keeps (``EvalRows.slices``).
        rows_per_slice: at most this many rows per value of ``slice_by``.
        columns: ``prompt_column`` / ``response_column`` of the file, by name (None: the ones
            the first adapter's run was told, where the file has them, else found by name);
            held-out rows are the adapters' only where these columns rebuild their split.

    Raises:
        finetune.data.DataError: the file cannot be read, a column named is not in it, or it
            has no usable row.

    ``slice_by`` must be a column of the file: :func:`eval.run.evaluate` refuses one that is
    not (:func:`check_slice_column`) before the model loads.
    """
    quota = _Quota(rows_per_slice if slice_by else None, max_samples)
    reason = "held-out rows not requested"
    if use_validation_split and manifests:
        splits, reason = _training_splits(tokenizer, manifests, data, columns)
        if splits:
            return _held_out(tokenizer, splits, quota, slice_by)
    first = next(iter(manifests.values()), {}).get("data") or {}
    system = first.get("system_prompt") or system_prompt or None
    max_length = first.get("max_length") or DataArgs.max_length
    told = (columns, first)
    return _first_rows(tokenizer, data, quota, system, max_length, reason, slice_by, told)


class _Quota:
    """Which rows to keep: the first ``total``, at most ``per_slice`` of each label."""

    def __init__(self, per_slice: int | None, total: int):
        self.per_slice, self.total, self.counts, self.kept = per_slice, total, {}, 0

    def take(self, label) -> bool:
        """Keep a row with ``label``? (counts it when kept)"""
        if self.kept >= self.total:
            return False
        if self.per_slice is not None:
            if self.counts.get(label, 0) >= self.per_slice:
                return False
            self.counts[label] = self.counts.get(label, 0) + 1
        self.kept += 1
        return True

    @property
    def full(self) -> bool:
        return self.kept >= self.total

    def note(self) -> str:
        return f", at most {self.per_slice} per slice" if self.per_slice is not None else ""


def _training_splits(
    tokenizer, manifests: dict[str, dict], data: str, columns: dict | None = None
) -> tuple[list, str]:
    """[(DataArgs, PreparedData)] per adapter, or ([], why not) when one cannot be rebuilt (read
    in ``columns`` where given)."""
    splits = []
    for name, manifest in manifests.items():
        want = (manifest.get("data") or {}).get("fingerprint")
        if not want:
            return [], f"adapter {name!r} records no training-data fingerprint"
        candidates = _candidate_args(manifest, data)
        if columns:  # the fingerprint covers the mapping: other columns are another split
            candidates = [replace(a, messages_column=None, **columns) for a in candidates]
        for args in candidates:
            try:
                prepared = prepare(args, tokenizer)
            except DataError:  # not its columns, no row fits: not its training file either
                continue  # (a file no one can read says so again when its first rows are read)
            if prepared.fingerprint == want:
                if args.with_passages:
                    # The same rows and split, prompted as the customer asks: a training row's
                    # passages come from the training split alone, but the rows past its
                    # max_samples would be shown one another. Grounding is the answering's.
                    args = replace(args, with_passages=0)
                    prepared = prepare(args, tokenizer)
                splits.append((args, prepared))
                break
        else:
            return [], (
                f"{data} with adapter {name!r}'s split settings does not reproduce its "
                "training data (another file, or settings the manifest does not record)"
            )
    return splits, ""


def _candidate_args(manifest: dict, data: str) -> list[DataArgs]:
    """DataArgs the adapter may have been trained with, most likely first, on file ``data``."""
    recorded = manifest.get("data") or {}
    run_config = Path(str(manifest.get("run_dir", ""))) / "config.json"
    if manifest.get("run_dir") and run_config.is_file():
        try:
            return [replace(RunConfig.load(run_config).data, path=str(data))]
        except (ValueError, OSError):
            pass  # an edited or foreign config: fall back to what the manifest says
    known = {f.name for f in fields(DataArgs)} - {"path"}
    args = DataArgs(path=str(data), **{k: v for k, v in recorded.items() if k in known})
    mapping = recorded.get("mapping") or {}
    if mapping.get("messages"):
        args = replace(args, messages_column=mapping["messages"])
    elif mapping.get("prompt") and mapping.get("response"):
        args = replace(args, prompt_column=mapping["prompt"], response_column=mapping["response"])
    # Manifests may lack max_samples; the rows kept were train_rows + val_rows (exact unless
    # tokenizing dropped rows). Tried first: it tokenizes only those rows. The fingerprint
    # check rejects a wrong guess.
    counted = [recorded.get("train_rows"), recorded.get("val_rows")]
    if "max_samples" not in recorded and all(isinstance(c, int) for c in counted):
        return [replace(args, max_samples=sum(counted)), args]
    return [args]


def _held_out(tokenizer, splits: list, quota: _Quota, slice_by: str | None) -> EvalRows:
    """Rows no adapter trained on: the first adapter's validation rows, then unused rows."""
    args, prepared = splits[0]
    trained = set()
    for _, other in splits:
        trained.update(_keys(other.rows_raw["train"]))
    labels_of = _labels_by_key(args.path, prepared.mapping, slice_by)
    raw, tokenized = prepared.rows_raw["val"], prepared.val
    pick, labels = _pick(raw, trained, labels_of, quota)
    extra = ""
    if not quota.full and args.max_samples is not None:
        # Training kept only the first max_samples rows of its shuffle: the ones after them
        # are unseen too. The same seed gives the same shuffle; only the rows needed are
        # tokenized (all of them when a slice quota has to look further).
        more = None if quota.per_slice is not None else args.max_samples + quota.total
        wider = replace(args, max_samples=more, val_fraction=0.0)
        full = prepare(wider, tokenizer)
        raw, tokenized = full.rows_raw["train"], full.train
        quota = _Quota(quota.per_slice, quota.total)
        pick, labels = _pick(raw, trained, labels_of, quota)
        extra = f" plus rows beyond its max_samples={args.max_samples}"
    if not pick:
        raise ValueError("every row of the dataset was used for training; no held-out row is left")
    note = (
        f"held-out rows: the validation split (seed {args.seed}, val_fraction "
        f"{args.val_fraction}){extra}, minus any row an evaluated adapter trained on"
        f"{quota.note()}"
    )
    raw_rows = raw.select(pick).to_dict()
    examples = tokenized.select(pick).select_columns(["input_ids", "labels"]).to_dict()
    examples = [
        dict(input_ids=i, labels=lab)
        for i, lab in zip(examples["input_ids"], examples["labels"], strict=True)
    ]
    rows = _make_rows(raw_rows, examples, args.system_prompt, True, note)
    mapping = _mapping_dict(prepared.mapping)
    return replace(rows, slice_by=slice_by, slices=labels if slice_by else None, mapping=mapping)


def _mapping_dict(mapping) -> dict:
    """A ColumnMapping's prompt / response / messages columns, as the manifests record them."""
    found = asdict(mapping)
    return {k: found[k] for k in ("prompt", "response", "messages")}


def _pick(raw, trained: set, labels_of: dict, quota: _Quota) -> tuple[list[int], list]:
    """Indices of untrained rows the quota keeps, and their slice labels."""
    pick, labels = [], []
    for i, key in enumerate(_keys(raw)):
        if key in trained:
            continue
        label = labels_of.get(key)
        if quota.take(label):
            pick.append(i)
            labels.append(label)
        if quota.full:
            break
    return pick, labels


def _labels_by_key(data: str, mapping, slice_by: str | None) -> dict:
    """(prompt, response, history) -> the row's ``slice_by`` value, from the file itself.

    The prepared split keeps only the normalized columns; the label is found again by the
    row's content (rows with equal content and different labels keep the first label).
    """
    if not slice_by:
        return {}
    rows, _, _ = normalize(load_rows(data), mapping, Path(str(data)).name, extra=slice_by)
    found = {}
    for key in zip(rows["prompt"], rows["response"], rows["history"], rows["extra"], strict=True):
        found.setdefault(key[:3], key[3])
    return found


def _first_rows(
    tokenizer,
    data: str,
    quota: _Quota,
    system_prompt: str | None,
    max_length: int,
    reason: str,
    slice_by: str | None,
    told: tuple = (None, {}),
) -> EvalRows:
    """The first usable rows of the file (at most the quota's per slice), in file order, read
    in ``told``'s columns: (the columns given, the first adapter's recorded data settings), as
    :func:`_told_columns` picks them."""
    ds = load_rows(data)
    fields_told = _told_columns(ds.column_names, *told)
    mapping = detect_mapping(ds.column_names, DataArgs(path=str(data), **fields_told))
    rows, _, _ = normalize(ds, mapping, Path(str(data)).name, extra=slice_by)
    rows.setdefault("extra", [None] * len(rows["prompt"]))
    fmt = ChatFormat(tokenizer, system_prompt)
    keep = {"prompt": [], "response": [], "intent": [], "history": [], "extra": []}
    examples, step = [], max(quota.total, 64)
    for start in range(0, len(rows["prompt"]), step):
        chunk = {k: v[start : start + step] for k, v in rows.items()}
        if quota.per_slice is not None:  # tokenize only rows whose slice still needs some
            wanted = [
                i
                for i, label in enumerate(chunk["extra"])
                if quota.counts.get(label, 0) < quota.per_slice
            ]
            chunk = {k: [v[i] for i in wanted] for k, v in chunk.items()}
        enc = fmt.encode_batch(chunk, max_length, "truncate_response")
        for i, status in enumerate(enc["status"]):
            if status in ("ok", "truncated") and quota.take(chunk["extra"][i]):
                examples.append({"input_ids": enc["input_ids"][i], "labels": enc["labels"][i]})
                for k in keep:
                    keep[k].append(chunk[k][i])
        if quota.full:
            break
    if not examples:
        raise ValueError(f"{data}: no row fits max_length {max_length} tokens")
    note = f"the first {len(examples)} usable rows of the file{quota.note()} ({reason})"
    rows = _make_rows(keep, examples, system_prompt, False, note)
    slices = keep["extra"] if slice_by else None
    return replace(rows, slice_by=slice_by, slices=slices, mapping=_mapping_dict(mapping))


def _make_rows(
    raw: dict, examples: list[dict], system_prompt, held_out: bool, note: str
) -> EvalRows:
    prompt_ids = []
    for ex in examples:
        n_prompt = next(i for i, label in enumerate(ex["labels"]) if label != IGNORE_INDEX)
        prompt_ids.append(list(ex["input_ids"][:n_prompt]))
    return EvalRows(
        prompts=list(raw["prompt"]),
        references=list(raw["response"]),
        intents=list(raw["intent"]),
        examples=examples,
        prompt_ids=prompt_ids,
        system_prompt=system_prompt,
        held_out=held_out,
        note=note,
    )


def training_pairs(tokenizer, manifests: dict[str, dict], data: str) -> set[tuple[str, str]] | None:
    """``(prompt, response)`` of every row an evaluated adapter trained on in ``data``, or None
    when a training split cannot be rebuilt (no manifest, another file, unrecorded settings)."""
    splits, _ = _training_splits(tokenizer, manifests, data) if manifests else ([], "")
    if not splits:
        return None
    pairs = set()
    for _, prepared in splits:
        cols = prepared.rows_raw["train"].select_columns(["prompt", "response"]).to_dict()
        pairs.update(zip(cols["prompt"], cols["response"], strict=True))
    return pairs


def _keys(raw) -> list[tuple]:
    cols = raw.select_columns(["prompt", "response", "history"]).to_dict()
    return list(zip(cols["prompt"], cols["response"], cols["history"], strict=True))


def load_golden(path: str | Path) -> list[dict]:
    """Golden prompts (``id``, ``prompt``, ``must_contain``, ``must_not_contain``) from JSONL.

    A relative path that does not exist from the working folder is looked up in the
    repository, so ``assets/golden.jsonl`` works from anywhere.
    """
    p = Path(path)
    if not p.is_file() and not p.is_absolute() and (REPO_ROOT / p).is_file():
        p = REPO_ROOT / p
    if not p.is_file():
        raise FileNotFoundError(f"golden prompts file {path} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"golden prompts file {p.name} is not UTF-8 text (JSON lines)") from None
    golden = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{p.name} line {n}: not a JSON object ({err.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise ValueError(f"{p.name} line {n}: needs a text 'prompt'")
            for key in ("must_contain", "must_not_contain"):
                if not isinstance(row.get(key, []), list) or not all(
                    isinstance(x, str) for x in row.get(key, [])
                ):
                    raise ValueError(f"{p.name} line {n}: '{key}' must be a list of phrases")
            check_unicode(row["prompt"], f"{p.name} line {n}: the prompt")
            golden.append(
                {
                    "id": str(row.get("id", n)),
                    "prompt": row["prompt"],
                    "must_contain": list(row.get("must_contain", [])),
                    "must_not_contain": list(row.get("must_not_contain", [])),
                    # other text fields (intent, ...): what slices the golden checks
                    "fields": {k: v for k, v in row.items() if isinstance(v, str)},
                }
            )
    if not golden:
        raise ValueError(
            f"golden prompts file {p.name} holds no prompt; give one JSON object a line, or "
            "leave the golden prompts out (--no-golden)"
        )
    return golden


def golden_prompt_ids(tokenizer, golden: list[dict], system_prompt: str | None) -> list[list[int]]:
    """Token ids of each golden prompt, rendered exactly as training renders a prompt."""
    fmt = ChatFormat(tokenizer, system_prompt)
    # encode_chat: a golden prompt's text stays text, whatever it holds (as in training).
    return encode_chats(tokenizer, [fmt.messages(g["prompt"]) for g in golden])


def answer_cap(tokenizer, references: list[str]) -> int:
    """The answer length an evaluation allows when none is given: the ``ANSWER_CAP_PERCENTILE``
    percentile of the reference answers' token counts (and an end of turn), rounded up to a
    multiple of 16, within ``ANSWER_CAP_BOUNDS``."""
    lo, hi = ANSWER_CAP_BOUNDS
    lengths = [len(tokenizer(text, add_special_tokens=False).input_ids) + 1 for text in references]
    if not lengths:
        return lo
    at = int(np.percentile(lengths, ANSWER_CAP_PERCENTILE, method="higher"))
    return min(hi, max(lo, -(-at // 16) * 16))
