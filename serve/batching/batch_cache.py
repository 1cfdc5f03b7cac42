"""The running batch's KV cache: rows join after their own prefill and leave when they end.

Every row's real tokens are the LAST columns of the cache, left-padded with zeros that the
attention mask hides, so a decode step appends one column for every row at once. A row keeps
its own position ids (the count of its real tokens), so RoPE sees exactly the positions it
would alone; the padding only adds masked-out keys, whose softmax weight is exactly zero.

    cache keys/values per layer: (rows, kv_heads, columns, head_dim)
    mask:                        (rows, columns)   1 = real token, 0 = padding
    positions:                   (rows,)           position id of each row's next token

When rows leave, leading columns that are padding in every remaining row are cut, so the
cache is never longer than its longest row.

The batch's layers keep their keys and values in buffers with spare columns
(:class:`GrowingLayer`), so a decode step writes one column in place where transformers'
``DynamicLayer`` copies the whole cache (``torch.cat``) at every step of every layer, a cost
that grows with the answer (docs/serving.md).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

SPARE_COLUMNS = 64  # columns a layer's buffers gain when full (one copy per 64 decode steps)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of buffers with spare columns.

    ``update`` writes new columns into the spare ones and copies only when they run out.
    Shapes as ``DynamicLayer``'s: ``keys`` and ``values`` are (rows, kv_heads, columns, head_dim).
    Build one with :meth:`gather`.
    """

    @classmethod
    def gather(
        cls,
        parts: list[tuple[torch.Tensor, torch.Tensor]],
        columns: int,
        spare: int = SPARE_COLUMNS,
    ) -> GrowingLayer:
        """The rows of ``parts`` ((keys, values) pairs) stacked in order, each right-aligned to
        ``columns`` columns: the columns before a shorter part stay zero (masked padding)."""
        layer = cls()
        keys, values = parts[0]
        rows = sum(k.shape[0] for k, _ in parts)
        layer._keys = keys.new_zeros(rows, keys.shape[1], columns + spare, keys.shape[3])
        layer._values = values.new_zeros(rows, values.shape[1], columns + spare, values.shape[3])
        at = 0
        for keys, values in parts:
            end, start = at + keys.shape[0], columns - keys.shape[2]
            layer._keys[at:end, :, start:columns] = keys
            layer._values[at:end, :, start:columns] = values
            at = end
        layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
        layer._view(columns)
        return layer

    def _view(self, length: int) -> None:
        self.length = length
        self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        if self.length + new > self._keys.shape[2]:  # out of spare columns: one bigger copy
            grown = GrowingLayer.gather(
                [(self.keys, self.values)], self.length, max(SPARE_COLUMNS, new)
            )
            self._keys, self._values = grown._keys, grown._values
        end = self.length + new
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self._view(end)
        return self.keys, self.values


def check_cache(cache) -> None:
    """Refuse cache kinds this batch cannot join (sliding windows, static or offloaded caches)."""
    kinds = {DynamicLayer if type(layer) is GrowingLayer else type(layer) for layer in cache.layers}
    if kinds != {DynamicLayer}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise ValueError(
            f"continuous batching needs full-attention dynamic cache layers; "
            f"this model's cache has {names}"
        )


def _left_pad(tensor: torch.Tensor, columns: int, dim: int) -> torch.Tensor:
    """``tensor`` with ``columns`` zero columns put before it along ``dim``."""
    if columns == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


class BatchCache:
    """The KV cache, attention mask and positions of the rows being decoded together."""

    def __init__(self):
        self.cache = None  # a transformers DynamicCache, or None while no row runs
        self.mask = torch.zeros(0, 0, dtype=torch.long)
        self.positions = torch.zeros(0, dtype=torch.long)

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def columns(self) -> int:
        return self.mask.shape[1]

    def join(self, cache, mask: torch.Tensor) -> None:
        """Append the rows of a prefilled ``cache`` whose prompt mask is ``mask`` (n, length).

        The shorter side (the running rows or the newcomers) is left-padded to the other's
        length; rows are appended after the running ones, in order.
        """
        check_cache(cache)
        mask = mask.to(torch.long)
        positions = mask.sum(dim=1)  # the next token's position id = real tokens so far
        if self.cache is None or self.rows == 0:
            cache.layers[:] = [
                GrowingLayer.gather([(layer.keys, layer.values)], mask.shape[1])
                for layer in cache.layers
            ]
            self.cache, self.mask, self.positions = cache, mask, positions
            return
        width = max(self.columns, mask.shape[1])
        own, new = width - self.columns, width - mask.shape[1]
        self.cache.layers[:] = [
            GrowingLayer.gather([(mine.keys, mine.values), (theirs.keys, theirs.values)], width)
            for mine, theirs in zip(self.cache.layers, cache.layers, strict=True)
        ]
        self.mask = torch.cat([_left_pad(self.mask, own, 1), _left_pad(mask, new, 1)])
        self.positions = torch.cat([self.positions, positions])

    def keep(self, indices: list[int]) -> None:
        """Keep only the rows at ``indices`` (in that order) and cut all-padding columns."""
        if len(indices) == self.rows:
            return
        if not indices:
            self.__init__()
            return
        index = torch.tensor(indices, dtype=torch.long)
        self.mask, self.positions = self.mask[index], self.positions[index]
        cut = int((self.mask.sum(dim=0) > 0).to(torch.long).argmax())  # first column in use
        self.mask = self.mask[:, cut:]
        self.cache.layers[:] = [
            GrowingLayer.gather(
                [(layer.keys[index, :, cut:], layer.values[index, :, cut:])], self.columns
            )
            for layer in self.cache.layers
        ]

    def step_inputs(self, last_tokens: torch.Tensor) -> dict:
        """Forward-pass arguments for one decode step feeding ``last_tokens`` (rows,)."""
        ones = torch.ones(self.rows, 1, dtype=torch.long)
        return {
            "input_ids": last_tokens.view(-1, 1),
            "attention_mask": torch.cat([self.mask, ones], 1),
            "position_ids": self.positions.view(-1, 1),
            "past_key_values": self.cache,
            "use_cache": True,
        }

    def advance(self) -> None:
        """After a decode step: every row gained one real token (the cache one column)."""
        self.mask = torch.cat([self.mask, torch.ones(self.rows, 1, dtype=torch.long)], 1)
        self.positions = self.positions + 1


def fresh_cache():
    """An empty cache whose layers will all be full-attention ``DynamicLayer`` s."""
    from transformers.cache_utils import DynamicCache

    return DynamicCache()


def prefill_inputs(
    input_ids: torch.Tensor, mask: torch.Tensor, past=None, past_mask: torch.Tensor | None = None
) -> dict:
    """Forward-pass arguments for the prompts of newcomers (left-padded), on a fresh cache or
    after ``past`` (a cache of reused beginnings whose real columns ``past_mask`` marks).

    Position ids count real tokens only (as ``generate`` does for left-padded batches), so a
    padded prompt gets the positions it would have alone.

    A fresh cache is one of full-attention layers whatever the model: a sliding-window model
    (Mistral, Gemma 3's local layers) then keeps every column, which the batch can join, and
    transformers masks each layer's window from the model's config. Measured equal to
    ``generate`` with its windowed cache, token for token (tests/serve/test_every_request_ends.py).
    """
    positions = (mask.to(torch.long).cumsum(dim=1) - 1).clamp(min=0)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": positions,
        "use_cache": True,
        "past_key_values": fresh_cache(),
    }
    if past is not None:
        positions += past_mask.sum(dim=1, keepdim=True)
        inputs.update(attention_mask=torch.cat([past_mask, mask], dim=1), past_key_values=past)
    return inputs


def past_cache(parts: list[tuple[torch.Tensor, torch.Tensor] | None], columns: int, spare: int):
    """A cache holding each row's reused beginning, right-aligned to ``columns`` columns.

    Args:
        parts: per row, (keys, values) of shape (layers, kv_heads, tokens, head_dim), or None.
        columns: the longest beginning; shorter ones are left-padded with masked zeros.
        spare: columns to keep free for the prompts' remaining tokens.
    """
    from transformers.cache_utils import DynamicCache

    keys, values = next(p for p in parts if p is not None)
    empty_k, empty_v = keys[:, :, :0], values[:, :, :0]
    rows = [p if p is not None else (empty_k, empty_v) for p in parts]
    cache = DynamicCache()
    cache.layers = [
        GrowingLayer.gather(
            [(k[layer : layer + 1], v[layer : layer + 1]) for k, v in rows], columns, spare
        )
        for layer in range(keys.shape[0])
    ]
    return cache


def row_columns(cache, mask: torch.Tensor, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``row``'s real columns (``mask`` 1) of every layer, copied:
    (keys, values), each (layers, kv_heads, real tokens, head_dim)."""
    columns = mask[row].nonzero().view(-1).to(cache.layers[0].keys.device)  # mask: on the CPU
    keys = torch.stack([layer.keys[row].index_select(1, columns) for layer in cache.layers])
    values = torch.stack([layer.values[row].index_select(1, columns) for layer in cache.layers])
    return keys, values
