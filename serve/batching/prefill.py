"""Newcomers' prompts prefilled together, after the beginnings the prefix cache already holds.

Each prompt takes its longest stored beginning for its adapter version
(:class:`~serve.batching.prefix_cache.PrefixCache`) as a past cache, right-aligned; the rest
of every prompt is left-padded and run in one forward pass. A row's columns are then::

    [padding] [reused beginning] [padding] [rest of the prompt]
     masked    from the cache     masked    computed now

Positions count real tokens only, so each row sees exactly what it would see alone. Every
prompt is stored afterwards, for the prompts that follow.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from serve.batching.batch_cache import past_cache, prefill_inputs, row_columns
from serve.batching.prefix_cache import PrefixCache


def prefill_prompts(
    forward: Callable, prefix: PrefixCache, rows: list, pad: int, packed: Callable | None = None
):
    """One forward pass over ``rows``' prompts (objects with ``prompt``, ``version``, ``peft``).

    Args:
        forward: ``forward(pefts, inputs)`` -> the model's output (the step router's).
        prefix: where beginnings are looked up and prompts stored.
        pad: the padding token id.
        packed: ``packed(pefts, padded inputs)`` -> (cache, last logits): the same pass
            without padding (``packed_prefill.py``), used when prompts differ in length.

    Returns:
        (cache, mask, last logits): the rows' KV cache, its (rows, columns) mask of real
        tokens, and each row's logits at its last prompt token, (rows, vocab).
    """
    hits = [prefix.lookup(r.version, r.prompt) for r in rows]
    done = [hit.tokens if hit else 0 for hit in hits]
    rest = [r.prompt[n:] for r, n in zip(rows, done, strict=True)]
    width = max(len(t) for t in rest)
    ids = torch.tensor([[pad] * (width - len(t)) + t for t in rest])
    mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in rest])
    past = past_mask = None
    if any(done):
        reused = max(done)
        past = past_cache([(h.keys, h.values) if h else None for h in hits], reused, width)
        past_mask = torch.tensor([[0] * (reused - n) + [1] * n for n in done])
    inputs = prefill_inputs(ids, mask, past, past_mask)
    pefts = [r.peft for r in rows]
    if packed is not None and any(len(t) < width for t in rest):  # padding to leave out
        cache, logits = packed(pefts, inputs)
    else:
        out = forward(pefts, inputs)
        cache, logits = out.past_key_values, out.logits[:, -1]
    if past_mask is not None:
        mask = torch.cat([past_mask, mask], dim=1)
    for i, request in enumerate(rows):
        store_row(prefix, request.version, request.prompt, cache, mask, i)
    return cache, mask, logits


def store_row(
    prefix: PrefixCache, version, tokens: list[int], cache, mask: torch.Tensor, row: int
) -> None:
    """Store row ``row`` of ``cache`` (its real columns, which hold ``tokens``)."""
    prefix.store(version, tokens, *row_columns(cache, mask, row))
