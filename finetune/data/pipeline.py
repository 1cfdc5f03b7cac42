"""The data pipeline: load -> map columns -> normalize -> split -> tokenize -> stats.

``prepare(args, tokenizer)`` is the one entry point training, evaluation and the
``prepare-data`` command share; ``save_prepared`` / ``load_prepared`` persist its result.
Loading and its guards live in :mod:`finetune.data.load`, column mapping in
:mod:`finetune.data.rows`, chat formatting and label masking in :mod:`finetune.data.format`.

Tokenization runs through ``datasets.map`` in memory (``keep_in_memory=True``), not through the
library's on-disk cache: for support datasets (thousands of rows) it takes seconds, the explicit
``save_prepared`` folder keyed by the fingerprint is the cache worth having, and the default
cache would keep a copy of every uploaded file under ~/.cache. ``num_proc`` stays 1: on a
small CPU a second process is no faster for files of this size (worker start-up and pickling
the tokenizer eat the gain).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from finetune.data.collate import supports_packing
from finetune.data.conversations import conversation_stats
from finetune.data.format import KEPT, ChatFormat
from finetune.data.load import DataError, content_hash, load_rows, quiet
from finetune.data.passages import (
    AUTO,
    choose_passages,
    encode_grounded,
    token_limit,
    train_split_grounder,
)
from finetune.data.rows import ColumnMapping, detect_mapping, normalize

__all__ = [
    "ColumnMapping",
    "DataError",
    "PreparedData",
    "detect_mapping",
    "fingerprint",
    "load_prepared",
    "load_rows",
    "prepare",
    "save_prepared",
    "split",
    "supports_packing",
]
RAW_COLUMNS = ("prompt", "response", "intent", "history")
TOKEN_COLUMNS = ("input_ids", "labels", "length")


@dataclass
class PreparedData:
    """Tokenized train/validation sets plus what is needed to describe and reuse them."""

    train: object  # datasets.Dataset: input_ids, labels, length
    val: object  # datasets.Dataset: same columns; may have 0 rows
    stats: dict  # counts, token length percentiles, intents (see ``_stats``)
    fingerprint: str  # 16 hex chars identifying rows, mapping, template and settings
    mapping: ColumnMapping
    # {"train", "val"}: untokenized prompt/response/intent/history, row-aligned with train/val
    rows_raw: dict = field(default_factory=dict)


def prepare(args, tokenizer, max_bytes: int | None = None) -> PreparedData:
    """Load, map, normalize, split and tokenize the dataset that ``args`` names.

    Args:
        args: a ``finetune.config.DataArgs``.
        tokenizer: the base model's tokenizer (its chat template shapes the tokens).
        max_bytes: file size limit passed to :func:`load_rows`.

    Raises:
        DataError: a ``ValueError`` naming the file and the problem.
    """
    from datasets import Dataset, Features, Value

    ds = load_rows(args.path, max_bytes)
    source = Path(str(args.path)).name or str(args.path)
    try:
        mapping = detect_mapping(ds.column_names, args)
    except DataError as err:
        raise DataError(f"{source}: {err}") from None
    rows, skipped, examples = normalize(ds, mapping, source)
    fmt = ChatFormat(tokenizer, args.system_prompt)
    fp = fingerprint(
        content_hash(args.path, ds), mapping, fmt.template_text, _tokenizer_hash(tokenizer), args
    )
    table = Dataset.from_dict(rows, features=Features({c: Value("string") for c in RAW_COLUMNS}))
    parts, counts, shown = {}, Counter(), Counter()
    splits = split(table, args)
    with quiet(), _grounder(args, fmt, fp, splits[0]) as (grounder, choice):
        for name, raw in zip(("train", "val"), splits, strict=True):
            share = getattr(args, "passage_share", 1.0) if name == "train" else 1.0
            parts[name] = _tokenize(raw, fmt, args, f"{fp}-{name}", counts, grounder, shown, share)
    limit = token_limit(args) if grounder is not None else args.max_length
    if parts["train"].num_rows == 0:
        dropped = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)
        raise DataError(
            f"{source}: no training row is left after tokenizing with max_length "
            f"{limit} ({dropped or 'no rows selected'}); raise --max-length or "
            "use shorter prompts"
        )
    stats = _stats(
        args, fp, mapping, fmt, ds.num_rows, skipped, examples, table.num_rows, parts, counts
    )
    # Typed "<|im_start|>" and the like are trained on as text (encode_chat); say how often.
    stats["rows_with_control_tokens"] = fmt.count_control_rows(rows)
    if grounder is not None or choice is not None:
        stats["passages"] = {
            "with_passages": args.with_passages,
            "passage_share": getattr(args, "passage_share", 1.0),
            "token_limit": limit,
            **(
                {
                    "knowledge_fingerprint": grounder.version.fingerprint,
                    "rows_by_passages_shown": {str(n): shown[n] for n in sorted(shown)},
                }
                if grounder is not None
                else {}
            ),
            **({"auto": {**choice.to_dict(), "line": choice.line()}} if choice else {}),
        }
    return PreparedData(
        train=parts["train"].select_columns(list(TOKEN_COLUMNS)),
        val=parts["val"].select_columns(list(TOKEN_COLUMNS)),
        stats=stats,
        fingerprint=fp,
        mapping=mapping,
        rows_raw={k: v.select_columns(list(RAW_COLUMNS)) for k, v in parts.items()},
    )


def split(table, args) -> tuple:
    """Seeded shuffle, then ``max_samples``, then the first ``val_fraction`` rows to validation.

    At least one validation row whenever ``val_fraction > 0`` and there are two rows or more,
    so a tiny dataset still gets an eval loss; never all of them.
    """
    table = table.shuffle(seed=args.seed)
    if args.max_samples is not None:
        table = table.select(range(min(args.max_samples, table.num_rows)))
    n = table.num_rows
    n_val = round(n * args.val_fraction) if args.val_fraction > 0 else 0
    if args.val_fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    return table.select(range(n_val, n)), table.select(range(n_val))


def fingerprint(
    content: str, mapping: ColumnMapping, template_text: str, tokenizer_hash: str, args
) -> str:
    """sha256 (16 hex chars) over everything that changes the tokens or the rows chosen.

    Content hash of the raw file(s), the column mapping, the chat template, the tokenizer,
    max_length, truncation, system prompt, last-turn-only, and the split settings (seed,
    val_fraction, max_samples): two prepared folders with the same fingerprint hold the same
    examples. File name, location and collation settings (packing) do not count.
    """
    keyed = {
        "content": content,
        "mapping": asdict(mapping),
        "template": template_text,
        "tokenizer": tokenizer_hash,
        "max_length": args.max_length,
        "truncation": args.truncation,
        "system_prompt": args.system_prompt or None,
        "seed": args.seed,
        "val_fraction": args.val_fraction,
        "max_samples": args.max_samples,
    }
    if getattr(args, "last_turn_only", False):  # absent from older fingerprints' keys
        keyed["last_turn_only"] = True
    if getattr(args, "with_passages", 0):
        keyed["with_passages"] = args.with_passages
        if getattr(args, "passage_share", 1.0) != 1.0:  # only when set: older keys stay the same
            keyed["passage_share"] = args.passage_share
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def save_prepared(data: PreparedData, folder: str | Path) -> Path:
    """Write ``tokenized/`` and ``rows/`` (``save_to_disk``) and ``stats.json``, atomically."""
    from datasets import DatasetDict

    from core.paths import atomic_dir

    folder = Path(folder)
    with atomic_dir(folder) as tmp, quiet():
        DatasetDict({"train": data.train, "val": data.val}).save_to_disk(str(tmp / "tokenized"))
        DatasetDict(data.rows_raw).save_to_disk(str(tmp / "rows"))
        meta = {
            "fingerprint": data.fingerprint,
            "mapping": asdict(data.mapping),
            "stats": data.stats,
        }
        (tmp / "stats.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    return folder


def load_prepared(folder: str | Path) -> PreparedData:
    """Read back a folder written by :func:`save_prepared`."""
    from datasets import load_from_disk

    folder = Path(folder)
    meta_file = folder / "stats.json"
    if not meta_file.is_file():
        raise DataError(f"{folder}: not a prepared dataset folder (no stats.json)")
    meta = json.loads(meta_file.read_text())
    tokenized = load_from_disk(str(folder / "tokenized"))
    rows = load_from_disk(str(folder / "rows"))
    return PreparedData(
        train=tokenized["train"],
        val=tokenized["val"],
        stats=meta["stats"],
        fingerprint=meta["fingerprint"],
        mapping=ColumnMapping(**meta["mapping"]),
        rows_raw={"train": rows["train"], "val": rows["val"]},
    )


@contextmanager
def _grounder(args, fmt: ChatFormat, fp: str, train_raw):
    """``(grounder, choice)``: the training split's ``Grounder`` when rows train with passages
    (else None), and what ``with_passages = "auto"`` chose (else None)."""
    asked = getattr(args, "with_passages", 0)
    if not asked:
        yield None, None
        return
    with train_split_grounder(train_raw, args, fmt, fp) as grounder:
        if asked != AUTO:
            yield grounder, None
            return
        choice = choose_passages(
            grounder.version, list(train_raw["prompt"]), list(train_raw["response"])
        )
        yield (grounder if choice.passages else None), choice


def _tokenize(
    raw,
    fmt: ChatFormat,
    args,
    new_fingerprint: str,
    counts: Counter,
    grounder=None,
    shown: Counter | None = None,
    share: float = 1.0,
):
    """Encode rows (keeping the raw columns alongside) and drop the rows that do not fit.

    With a ``grounder``, the ``share`` of rows it picks is shown its passages
    (``finetune.data.passages``) and ``shown`` counts the kept rows by how many passages they
    were shown.
    """
    from datasets import Dataset, Features, List, Value

    ids = List(Value("int32"))  # token ids fit in int32; half the memory of int64
    features = Features(
        {
            **{c: Value("string") for c in RAW_COLUMNS},
            "input_ids": ids,
            "labels": ids,
            "length": Value("int32"),
            "status": Value("string"),
            **({"passages": Value("int32")} if grounder is not None else {}),
        }
    )
    dropped = ("status", "passages")
    if raw.num_rows == 0:  # map() skips empty datasets without adding the new columns
        return Dataset.from_dict(
            {c: [] for c in features if c not in dropped},
            features=Features({c: f for c, f in features.items() if c not in dropped}),
        )

    def encode(batch: dict) -> dict:
        if grounder is not None:
            return encode_grounded(batch, fmt, args, grounder, share)
        return fmt.encode_batch(
            batch, args.max_length, args.truncation, getattr(args, "last_turn_only", False)
        )

    enc = raw.map(
        encode,
        batched=True,
        batch_size=512,
        keep_in_memory=True,
        features=features,
        # An explicit fingerprint spares datasets from pickling the tokenizer to hash the lambda.
        new_fingerprint=new_fingerprint,
    )
    status = enc["status"][:]
    counts.update(status)
    keep = [i for i, s in enumerate(status) if s in KEPT]
    if grounder is not None:
        passages = enc["passages"][:]
        shown.update(passages[i] for i in keep)
    return enc.select(keep).remove_columns([c for c in dropped if c in enc.column_names])


def _tokenizer_hash(tokenizer) -> str:
    """Identity of the vocabulary and merges (two template-less tokenizers must not collide)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("truncation", None)  # runtime settings, not the vocabulary
        spec.pop("padding", None)
    else:
        spec = sorted(tokenizer.get_vocab().items())
    spec = [spec, tokenizer.eos_token, tokenizer.bos_token]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _stats(args, fp, mapping, fmt, n_loaded, skipped, examples, n_usable, parts, counts) -> dict:
    import numpy as np

    lengths = np.array([n for p in parts.values() for n in p["length"][:]], dtype=np.int64)
    intents = Counter(i for p in parts.values() for i in p["intent"][:] if i is not None)
    label_total = sum(
        sum(1 for t in row if t != -100) for p in parts.values() for row in p["labels"][:]
    )

    def pct(q: float) -> int:
        return int(np.percentile(lengths, q, method="nearest")) if lengths.size else 0

    return {
        "source": str(args.path),
        "fingerprint": fp,
        "mapping": asdict(mapping),
        "template": "chat_template" if fmt.has_template else "fallback",
        "end_of_turn": fmt.end_of_turn,
        "system_prompt": args.system_prompt or None,
        "rows_loaded": n_loaded,
        "rows_skipped": sum(skipped.values()),
        "skip_reasons": dict(skipped),
        "skipped_examples": examples,
        "rows_usable": n_usable,
        "rows_selected": sum(counts.values()),
        "rows_train": parts["train"].num_rows,
        "rows_val": parts["val"].num_rows,
        "truncated": counts["truncated"],
        **conversation_stats(parts, counts),
        "dropped_too_long": counts["too_long"],
        "dropped_prompt_too_long": counts["prompt_too_long"],
        "dropped_template_error": counts["template_error"],
        "intent_count": len(intents),
        "intents": intents.most_common(10),
        "tokens": {
            "p50": pct(50),
            "p90": pct(90),
            "p99": pct(99),
            "max": pct(100),
            "mean": round(float(lengths.mean()), 1) if lengths.size else 0.0,
            "total": int(lengths.sum()),
            "label_total": label_total,
        },
        "max_length": args.max_length,
        "truncation": args.truncation,
        "with_passages": getattr(args, "with_passages", 0),
        "seed": args.seed,
        "val_fraction": args.val_fraction,
        "max_samples": args.max_samples,
    }
