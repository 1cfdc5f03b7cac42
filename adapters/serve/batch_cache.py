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
"""

from __future__ import annotations

import torch


def check_cache(cache) -> None:
    """Refuse cache kinds this batch cannot join (sliding windows, static or offloaded caches)."""
    from transformers.cache_utils import DynamicLayer

    kinds = {type(layer) for layer in cache.layers}
    if kinds != {DynamicLayer}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise ValueError(f"continuous batching needs full-attention dynamic cache layers; "
                         f"this model's cache has {names}")


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
            self.cache, self.mask, self.positions = cache, mask, positions
            return
        width = max(self.columns, mask.shape[1])
        own, new = width - self.columns, width - mask.shape[1]
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, own, 2), _left_pad(theirs.keys, new, 2)])
            mine.values = torch.cat([_left_pad(mine.values, own, 2),
                                     _left_pad(theirs.values, new, 2)])
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
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, cut:].contiguous()
            layer.values = layer.values[index, :, cut:].contiguous()

    def step_inputs(self, last_tokens: torch.Tensor) -> dict:
        """Forward-pass arguments for one decode step feeding ``last_tokens`` (rows,)."""
        ones = torch.ones(self.rows, 1, dtype=torch.long)
        return {"input_ids": last_tokens.view(-1, 1), "attention_mask": torch.cat([self.mask, ones], 1),
                "position_ids": self.positions.view(-1, 1), "past_key_values": self.cache,
                "use_cache": True}

    def advance(self) -> None:
        """After a decode step: every row gained one real token (the cache one column)."""
        self.mask = torch.cat([self.mask, torch.ones(self.rows, 1, dtype=torch.long)], 1)
        self.positions = self.positions + 1


def prefill_inputs(input_ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """Forward-pass arguments for the prompts of newcomers (left-padded, a fresh cache).

    Position ids count real tokens only (as ``generate`` does for left-padded batches), so a
    padded prompt gets the positions it would have alone.
    """
    positions = (mask.to(torch.long).cumsum(dim=1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": mask, "position_ids": positions,
            "use_cache": True}
