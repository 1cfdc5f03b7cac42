"""The batch cache's bookkeeping: left padding on join, cut columns on leave."""

from __future__ import annotations

import torch

from adapters.serve.batch_cache import BatchCache, prefill_inputs


class _Layer:
    def __init__(self, keys):
        self.keys, self.values = keys, keys.clone()


class _Cache:
    def __init__(self, *layers):
        self.layers = list(layers)


def _cache(rows, length, fill):
    return _Cache(*[_Layer(torch.full((rows, 2, length, 3), float(fill))) for _ in range(2)])


def test_join_left_pads_the_shorter_side_and_keep_cuts_unused_columns(monkeypatch):
    from adapters.serve import batch_cache

    monkeypatch.setattr(batch_cache, "check_cache", lambda cache: None)
    batch = BatchCache()
    batch.join(_cache(1, 3, 1), torch.ones(1, 3))
    batch.advance()  # a decode step added a column to the cache too
    for layer in batch.cache.layers:
        layer.keys = torch.cat([layer.keys, torch.full((1, 2, 1, 3), 1.0)], dim=2)
        layer.values = layer.keys.clone()
    batch.join(_cache(2, 6, 2), torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]))
    assert batch.mask.tolist() == [[0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert batch.positions.tolist() == [4, 5, 6]
    keys = batch.cache.layers[0].keys
    assert keys.shape == (3, 2, 6, 3) and keys[0, :, :2].abs().sum() == 0 and keys[0, 0, 2, 0] == 1
    step = batch.step_inputs(torch.tensor([7, 8, 9]))
    assert step["attention_mask"].shape == (3, 7) and step["position_ids"].tolist() == [[4], [5], [6]]
    batch.keep([0, 1])  # the longest row leaves: its first column is padding for the rest
    assert batch.mask.tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch.cache.layers[1].values.shape == (2, 2, 5, 3) and batch.positions.tolist() == [4, 5]
    batch.keep([])
    assert batch.rows == 0 and batch.cache is None


def test_prefill_positions_count_real_tokens_only():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    inputs = prefill_inputs(torch.zeros(2, 4, dtype=torch.long), mask)
    assert inputs["position_ids"].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
