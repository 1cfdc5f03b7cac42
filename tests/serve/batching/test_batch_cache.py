"""The batch cache's bookkeeping: left padding on join, cut columns on leave."""

from __future__ import annotations

import torch

from serve.batching.batch_cache import SPARE_COLUMNS, BatchCache, GrowingLayer, prefill_inputs


class _Layer:
    def __init__(self, keys):
        self.keys, self.values = keys, keys.clone()


class _Cache:
    def __init__(self, *layers):
        self.layers = list(layers)


def _cache(rows, length, fill):
    return _Cache(*[_Layer(torch.full((rows, 2, length, 3), float(fill))) for _ in range(2)])


def test_join_left_pads_the_shorter_side_and_keep_cuts_unused_columns(monkeypatch):
    from serve.batching import batch_cache

    monkeypatch.setattr(batch_cache, "check_cache", lambda cache: None)
    batch = BatchCache()
    batch.join(_cache(1, 3, 1), torch.ones(1, 3))
    batch.advance()  # a decode step added a column to the cache too
    for layer in batch.cache.layers:
        layer.update(torch.full((1, 2, 1, 3), 1.0), torch.full((1, 2, 1, 3), 1.0))
    batch.join(_cache(2, 6, 2), torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]))
    assert batch.mask.tolist() == [[0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert batch.positions.tolist() == [4, 5, 6]
    keys = batch.cache.layers[0].keys
    assert keys.shape == (3, 2, 6, 3) and keys[0, :, :2].abs().sum() == 0 and keys[0, 0, 2, 0] == 1
    step = batch.step_inputs(torch.tensor([7, 8, 9]))
    assert step["attention_mask"].shape == (3, 7) and step["position_ids"].tolist() == [
        [4],
        [5],
        [6],
    ]
    batch.keep([0, 1])  # the longest row leaves: its first column is padding for the rest
    assert batch.mask.tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch.cache.layers[1].values.shape == (2, 2, 5, 3) and batch.positions.tolist() == [4, 5]
    batch.keep([])
    assert batch.rows == 0 and batch.cache is None


def test_prefill_positions_count_real_tokens_only():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    inputs = prefill_inputs(torch.zeros(2, 4, dtype=torch.long), mask)
    assert inputs["position_ids"].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_growing_layer_writes_in_place_and_grows_when_full():
    keys = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    layer = GrowingLayer.gather([(keys, -keys)], 5)  # right-aligned: two zero columns first
    assert layer.keys.shape == (2, 1, 5, 2) and layer.keys[:, :, :2].abs().sum() == 0
    assert torch.equal(layer.keys[:, :, 2:], keys) and torch.equal(layer.values[:, :, 2:], -keys)
    buffer = layer._keys.data_ptr()
    seen = []
    for step in range(SPARE_COLUMNS + 3):
        column = torch.full((2, 1, 1, 2), float(step))
        got_keys, got_values = layer.update(column, -column)
        seen.append(layer._keys.data_ptr() == buffer)
        assert got_keys.shape == (2, 1, 6 + step, 2) and torch.equal(got_keys[:, :, -1:], column)
        assert torch.equal(got_values[:, :, -1:], -column)
    assert seen == [True] * SPARE_COLUMNS + [False] * 3  # one copy once the spare columns ran out
    assert (
        torch.equal(layer.keys[:, :, 2:5], keys) and layer.get_seq_length() == 5 + SPARE_COLUMNS + 3
    )
