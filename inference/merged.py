"""Fast single-adapter decoding: the adapter folded into copies of the base weights.

With LoRA unmerged, every adapted layer adds ``lora_B(lora_A(x)) * scaling`` to its output: on
2 CPU cores, r=16 on all 7 projections of SmolLM2-135M's 30 layers, that is 210 small extra
products a token and decode fell from ~31 to ~20-25 tokens/s (docs/benchmarks.md). When every
row of a call uses the same adapter (chat, evaluation), the session instead points each adapted
layer at ``W + scaling * B @ A``, computed once per adapter in fp32 and stored in the serving
dtype, and runs with the adapter layers off: the speed of the base model.

The base weights are never modified: the merged weights are separate tensors, swapped in for
one call and swapped back in ``finally``. Up to ``max_sets`` adapters keep their merged
weights (~0.2 GB each in bf16 for the default model), least recently used dropped first. Where
the base layers run through oneDNN's prepacked matmul (CPU float32, ``packed_linears.py``), a
set gets packed copies too (another ~0.4 GB for the default model) while they fit in memory.
In fp32 merged and unmerged answers agree; in bf16 the merged sum is rounded once, so a long
answer can differ from the unmerged compare pane by a token here and there.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

import torch

from inference.layers_off import adapters_off
from inference.packed_linears import add_pack, drop_pack, fits_packed


def _lora_layers(model, adapter: str) -> list:
    from peft.tuners.lora.layer import Linear as LoraLinear

    return [m for m in model.modules() if isinstance(m, LoraLinear) and adapter in m.lora_B]


def can_merge(model, adapter: str) -> bool:
    """Plain LoRA on Linear layers only (variants such as DoRA merge differently)."""
    from peft.tuners.lora.layer import Linear as LoraLinear
    from peft.tuners.tuners_utils import BaseTunerLayer

    held = [m for m in model.modules()
            if isinstance(m, BaseTunerLayer) and adapter in getattr(m, "lora_B", {})]
    return all(isinstance(m, LoraLinear) and not m.merged
               and adapter not in getattr(m, "lora_variant", {}) for m in held)


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
        merged, layers = [], _lora_layers(model, adapter)
        pack = fits_packed(sum(m.get_base_layer().weight.nbytes for m in layers))
        with torch.no_grad():
            for layer in layers:
                base = layer.get_base_layer().weight
                a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
                delta = (b.float() @ a.float()) * layer.scaling[adapter]
                if getattr(layer, "fan_in_fan_out", False):
                    delta = delta.t()
                weight = (base.float() + delta).to(base.dtype)
                if pack:  # a packed copy too, where the base layer runs packed
                    add_pack(layer.get_base_layer(), weight)
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
                param = layer.get_base_layer().weight
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
        drop_pack(layer.get_base_layer(), weight)
