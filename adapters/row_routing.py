"""One batched forward pass where each row uses its own adapter (or none): the compare panes.

PEFT's ``adapter_names`` does this by indexing every LoRA layer's input and output per
adapter, in Python, at each token: on 2 CPU cores that cost ~25 ms a token for 210 LoRA
layers (a two-pane compare took 1.64x one answer, docs/benchmarks.md). Masking is cheaper:
every adapter a row asks for is made active for the whole batch, and a hook multiplies each of
its ``lora_B`` outputs by a 0/1 column over the rows, so rows of other adapters (and base rows)
get exactly zero from it. Multiplying by 1 and adding 0 are exact, so each row computes what
it would alone; the extra LoRA products over a few more rows are nearly free (decode is bound
by reading the base weights, shared by all rows).

The active adapters and hooks are set inside ``masked_rows`` and restored when it exits; the
session calls it under its lock, so no other request sees them.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def can_mask(model, adapters: list[str]) -> bool:
    """True when every LoRA layer holding one of ``adapters`` is a plain (vanilla, unmerged)
    LoRA ``Linear``; other layer kinds and variants (DoRA, …) need PEFT's ``adapter_names``."""
    from peft.tuners.lora.layer import Linear as LoraLinear
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in model.modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        held = [a for a in adapters if a in getattr(module, "lora_B", {})]
        if not held:
            continue
        variants = getattr(module, "lora_variant", {})
        if not isinstance(module, LoraLinear) or module.merged or any(a in variants for a in held):
            return False
    return True


@contextmanager
def masked_rows(model, row_adapters: list[str | None]):
    """While open, row ``i`` of a batch through ``model`` uses PEFT adapter ``row_adapters[i]``
    (None: the base model alone). ``model`` is a PeftModel; check ``can_mask`` first."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    used = list(dict.fromkeys(a for a in row_adapters if a))
    tuner = model.base_model
    previous = list(tuner.active_adapters)
    handles = []
    masks: dict[tuple, torch.Tensor] = {}

    def mask_for(adapter: str, like: torch.Tensor) -> torch.Tensor:
        key = (adapter, like.dtype, like.device, like.dim())
        if key not in masks:
            column = torch.tensor([1.0 if a == adapter else 0.0 for a in row_adapters],
                                  dtype=like.dtype, device=like.device)
            masks[key] = column.view(-1, *([1] * (like.dim() - 1)))
        return masks[key]

    def hook_for(adapter: str):
        def keep_own_rows(module, inputs, output):
            return output * mask_for(adapter, output)
        return keep_own_rows

    try:
        if used:
            tuner.set_adapter(used, inference_mode=True)
            for module in model.modules():
                if isinstance(module, LoraLinear):
                    for adapter in used:
                        if adapter in module.lora_B:
                            handles.append(module.lora_B[adapter].register_forward_hook(hook_for(adapter)))
            yield
        else:
            with model.disable_adapter():
                yield
    finally:
        for handle in handles:
            handle.remove()
        if used:
            tuner.set_adapter(previous, inference_mode=True)
