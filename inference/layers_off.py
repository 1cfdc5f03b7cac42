"""Switching PEFT's adapter layers off for one forward pass, cheaply.

``PeftModel.disable_adapter()`` walks the model and flips ``requires_grad`` on every adapter
weight on the way in and out: on a model with thousands of modules that walk can cost more
than a whole decode step of one row. Generation needs only the flag each adapter layer reads
in its forward, so this sets that flag directly (through :mod:`core.lora_layers`) and restores
each layer's own value afterwards. Gradients do not matter here: every caller runs under
``torch.inference_mode``.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

from core import lora_layers

_CACHE: dict = {}


def switchable(model) -> list:
    """PEFT's switchable adapter layers in ``model`` (:func:`core.lora_layers.switchable_layers`),
    remembered while the model holds the same adapters."""
    key = (id(model), tuple(getattr(model, "peft_config", {}) or ()))
    held = _CACHE.get(key)
    if held is None or held[0]() is not model:  # the weakref: an id can be reused
        if len(_CACHE) >= 8:
            _CACHE.clear()
        held = _CACHE[key] = (weakref.ref(model), lora_layers.switchable_layers(model))
    return held[1]


@contextmanager
def adapters_off(model):
    """While open, every adapter layer of ``model`` passes its input through its base layer."""
    layers = switchable(model)
    before = [lora_layers.adapters_disabled(m) for m in layers]
    try:
        for m in layers:
            lora_layers.set_adapters_disabled(m, True)
        yield
    finally:
        for m, value in zip(layers, before, strict=True):
            lora_layers.set_adapters_disabled(m, value)
