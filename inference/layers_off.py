"""Switching PEFT's adapter layers off for one forward pass, cheaply.

``PeftModel.disable_adapter()`` walks the model and flips ``requires_grad`` on every adapter
weight on the way in and out: on the default model (3,129 modules, 210 LoRA layers) that
took 20-80 ms on 2 CPU cores, more than a whole decode step of one row. Generation needs
only the flag each adapter layer reads in its forward (``disable_adapters``), so this sets
that flag directly and restores each layer's own value afterwards. Gradients do not matter
here: every caller runs under ``torch.inference_mode``.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager


def _switchable(model) -> list:
    """PEFT's adapter layers and auxiliary wrappers (modules_to_save) inside ``model``."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    return [m for m in model.modules()
            if isinstance(m, (BaseTunerLayer, AuxiliaryTrainingWrapper))
            and hasattr(m, "_disable_adapters")]


_CACHE: dict = {}


def switchable(model) -> list:
    """:func:`_switchable`, remembered while the model holds the same adapters."""
    key = (id(model), tuple(getattr(model, "peft_config", {}) or ()))
    held = _CACHE.get(key)
    if held is None or held[0]() is not model:  # the weakref: an id can be reused
        if len(_CACHE) >= 8:
            _CACHE.clear()
        held = _CACHE[key] = (weakref.ref(model), _switchable(model))
    return held[1]


@contextmanager
def adapters_off(model):
    """While open, every adapter layer of ``model`` passes its input through its base layer."""
    layers = switchable(model)
    before = [m._disable_adapters for m in layers]
    try:
        for m in layers:
            m._disable_adapters = True
        yield
    finally:
        for m, value in zip(layers, before, strict=True):
            m._disable_adapters = value
