"""Batching tokenized examples (``input_ids``, ``labels``) for training.

Two shapes:

* **packed** (padding-free): every example of the micro-batch is laid end to end in one row,
  ``input_ids``/``labels``/``position_ids`` of shape (1, total_tokens), positions restarting at
  0 per example, and *no* ``attention_mask``. transformers 5 reads the restarts
  (``masking_utils.find_packed_sequence_indices``) and builds a block-diagonal causal mask
  for eager, sdpa and flex attention (flash attention derives ``cu_seqlens`` from the same
  positions). It only does so when ``attention_mask`` is None *and* there is no KV cache:
  with ``config.use_cache=True`` the model creates a cache even in training and silently
  attends across examples, so call :func:`prepare_model_for_packing` first.
* **padded**: right-padded rows with ``attention_mask`` and ``IGNORE_INDEX`` labels on padding,
  for attention implementations that cannot pack, or when ``DataArgs.packing`` is off;
  :func:`length_grouped_batches` keeps the padding small.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

IGNORE_INDEX = -100
# "tunedesk_short_rows" (finetune.train.cpu_attention, CPU training) takes sdpa's masks.
PACKING_ATTENTION = (
    "eager",
    "sdpa",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
    "tunedesk_short_rows",
)
# model_type values whose packed logits matched one-by-one logits (tiny random models, sdpa,
# transformers 5.23). Not every model reads position_ids that way: OPT, for one, attends
# across examples, so unknown architectures get padded batches.
PACKING_ARCHITECTURES = frozenset(
    {
        "cohere",
        "exaone4",
        "gemma",
        "gemma3_text",
        "glm",
        "gpt2",
        "gpt_neox",
        "granite",
        "helium",
        "lfm2",
        "llama",
        "ministral",
        "mistral",
        "mixtral",
        "olmo",
        "olmo2",
        "phi",
        "phi3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "smollm3",
        "stablelm",
        "starcoder2",
    }
)


def supports_packing(architecture: str) -> bool:
    """True when padding-free packing is known to keep examples apart for this model_type."""
    return architecture in PACKING_ARCHITECTURES


def collate(
    examples: Sequence[dict],
    pad_token_id: int,
    packing: bool = True,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """One batch: :func:`pack` when ``packing``, else :func:`pad`."""
    if packing:
        return pack(examples)
    return pad(examples, pad_token_id, pad_to_multiple_of)


def pack(examples: Sequence[dict]) -> dict[str, torch.Tensor]:
    """Concatenate examples into one padding-free row with restarting ``position_ids``.

    The loss shifts labels by one inside the model, so the last token of example i is scored
    against the first label of example i+1. That first label is set to ``IGNORE_INDEX``:
    no example learns to predict its neighbour's start.
    """
    ids, labels, positions = [], [], []
    for ex in examples:
        x, y = _as_list(ex["input_ids"]), _as_list(ex["labels"])
        if len(x) != len(y) or not x:
            raise ValueError(
                f"example has {len(x)} input ids and {len(y)} labels; expected "
                "the same non-zero number"
            )
        ids += x
        labels += [IGNORE_INDEX] + y[1:]
        positions += range(len(x))
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long),  # (1, T)
        "labels": torch.tensor([labels], dtype=torch.long),  # (1, T)
        "position_ids": torch.tensor([positions], dtype=torch.long),  # (1, T)
    }


def pad(
    examples: Sequence[dict], pad_token_id: int, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example (optionally rounded up) with an attention mask."""
    rows = [(_as_list(ex["input_ids"]), _as_list(ex["labels"])) for ex in examples]
    width = max(len(x) for x, _ in rows)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)  # (B, T)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


class Collator:
    """``data_collator`` for the Trainer: packed or padded batches.

    Args:
        pad_token_id: id used for padding (unused when packing); any id works since padding
            is masked and never scored.
        packing: padding-free packed batches (True) or right-padded ones.
        pad_to_multiple_of: round padded widths up (tensor-core friendly shapes on GPUs).
    """

    def __init__(
        self, pad_token_id: int, packing: bool = True, pad_to_multiple_of: int | None = None
    ):
        self.pad_token_id = pad_token_id
        self.packing = packing
        self.pad_to_multiple_of = pad_to_multiple_of

    @classmethod
    def for_tokenizer(cls, tokenizer, packing: bool = True, **kwargs) -> Collator:
        """Use the tokenizer's pad id, or its eos id when it has none (GPT-2)."""
        pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        return cls(pad_id, packing=packing, **kwargs)

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate(examples, self.pad_token_id, self.packing, self.pad_to_multiple_of)


def prepare_model_for_packing(model) -> None:
    """Make ``model`` treat packed batches as separate examples, or say why it cannot.

    Turns the KV cache off (see the module docstring: a cache disables packed-sequence
    detection) and checks the attention implementation.

    Raises:
        ValueError: the attention implementation does not split packed sequences.
    """
    config = model.config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in PACKING_ATTENTION:
        raise ValueError(
            f"attention implementation {impl!r} cannot keep packed examples apart; "
            f"use one of {', '.join(PACKING_ATTENTION)} or turn packing off"
        )
    config.use_cache = False


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, seed: int, group_factor: int = 50
) -> list[list[int]]:
    """Batches of indices with similar lengths, in a seeded random order.

    Indices are shuffled, cut into groups of ``batch_size * group_factor``, sorted by length
    inside each group and cut into batches; the batch order is shuffled again, with the batch
    holding the longest example first so an out-of-memory error shows at step 1, not later.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1 (got {batch_size})")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    group = batch_size * group_factor
    batches = []
    for start in range(0, len(order), group):
        chunk = sorted(order[start : start + group], key=lambda i: -lengths[i])
        batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    if batches:
        longest = max(range(len(batches)), key=lambda b: max(lengths[i] for i in batches[b]))
        batches.insert(0, batches.pop(longest))
    return batches


def batch_token_counts(batch: dict) -> dict[str, int]:
    """Real (non-pad) tokens, scored label tokens and padding tokens in a collated batch."""
    total = batch["input_ids"].numel()
    mask = batch.get("attention_mask")
    real = int(mask.sum()) if mask is not None else total
    labels = int((batch["labels"] != IGNORE_INDEX).sum())
    return {"tokens": real, "label_tokens": labels, "padding": total - real}


def _as_list(x) -> list[int]:
    return x.tolist() if hasattr(x, "tolist") else list(x)
