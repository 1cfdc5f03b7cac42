"""Fast single-adapter decoding: the adapter folded into copies of the base weights.

With LoRA unmerged, every adapted layer adds ``lora_B(lora_A(x)) * scaling`` to its output:
on the CPU, LoRA on every projection of a small model means hundreds of small extra products a
token, a large share of decode time. When every row of a call uses the same adapter (chat,
evaluation), the session instead points each adapted layer at ``W + scaling * B @ A``,
computed once per adapter in fp32 and stored in the serving dtype, and runs with the adapter
layers off: the speed of the base model.

The base weights are never modified: the merged weights are separate tensors, swapped in for
one call and swapped back in ``finally``. Up to ``max_sets`` adapters keep their merged
weights (each a copy of every adapted base weight), least recently used dropped first. Where
the base layers run through oneDNN's prepacked matmul (CPU float32, ``packed_linears.py``), a
set gets packed copies too while they fit in memory. In fp32 merged and unmerged answers
agree; in bf16 the merged sum is rounded once, so a long answer can differ from the unmerged
compare pane by a token here and there. The LoRA pieces are read through
:mod:`core.lora_layers`.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

import torch

from core import lora_layers
from inference.layers_off import adapters_off
from inference.packed_linears import add_pack, drop_pack, fits_packed


def can_merge(model, adapter: str) -> bool:
    """Plain LoRA on Linear layers only (variants such as DoRA merge differently)."""
    return all(
        lora_layers.is_plain(m, [adapter]) for m in lora_layers.adapter_layers(model, adapter)
    )


class MergedWeights:
    """Merged weight sets by PEFT adapter name; use under the session lock."""

    def __init__(self, max_sets: int = 2):
        self.max_sets = max_sets
        self._sets: OrderedDict[str, list[tuple[torch.nn.Module, torch.Tensor]]] = OrderedDict()

    def drop(self, adapter: str | None = None) -> None:
        """Forget one adapter's merged weights (all when None)."""
        for name in list(self._sets) if adapter is None else [adapter]:
            _forget(self._sets.pop(name, []))

    def _build(self, model, adapter: str) -> list[tuple[torch.nn.Module, torch.Tensor]]:
        merged, layers = [], lora_layers.lora_linears(model, adapter)
        pack = fits_packed(sum(lora_layers.base_layer(m).weight.nbytes for m in layers))
        with torch.no_grad():
            for layer in layers:
                base = lora_layers.base_layer(layer)
                delta = lora_layers.parts(layer, adapter).delta()
                weight = (base.weight.float() + delta).to(base.weight.dtype)
                if pack:  # a packed copy too, where the base layer runs packed
                    add_pack(base, weight)
                merged.append((layer, weight))
        return merged

    @contextmanager
    def use(self, model, adapter: str):
        """While open, ``model`` (a PeftModel) answers as ``adapter`` from merged weights."""
        if adapter not in self._sets:
            self._sets[adapter] = self._build(model, adapter)
            while len(self._sets) > self.max_sets:
                _forget(self._sets.popitem(last=False)[1])
        self._sets.move_to_end(adapter)
        swapped = []
        try:
            for layer, weight in self._sets[adapter]:
                param = lora_layers.base_layer(layer).weight
                swapped.append((param, param.data))
                param.data = weight
            with adapters_off(model):
                yield
        finally:
            for param, original in swapped:
                param.data = original


def _forget(merged: list[tuple[torch.nn.Module, torch.Tensor]]) -> None:
    """Drop the packed copies of a merged set that is being forgotten."""
    for layer, weight in merged:
        drop_pack(lora_layers.base_layer(layer), weight)
