"""How one model call is routed to its adapters: per call, never left switched afterwards.

:meth:`inference.session.ModelSession.generate` names an adapter per batch row; :func:`route`
picks the cheapest way to run exactly that:

- one adapter for every row (chat, evaluation): merged weight copies swapped in for the call
  (``merged.py``; the base tensors are never modified);
- the base for every row, or one adapter that cannot merge: PEFT's adapter layers switched
  off, or PEFT's active adapter set, for the call only (:func:`set_adapter`);
- different adapters per row (compare): each LoRA layer's forward replaced by its base
  ``Linear`` plus one stacked, row-masked update (``row_routing.py``);
- LoRA variants neither handles (DoRA, LoRA bias, quantized layers): PEFT's own
  ``adapter_names`` routing, whose hooks :func:`drop_adapter_name_hooks` clears after a failure.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

from inference.merged import can_merge
from inference.row_routing import can_mask, masked_rows

BASE = "__base__"  # PEFT's name for "no adapter" in adapter_names


def is_peft(model) -> bool:
    """Whether ``model`` is a PEFT wrapper (it is once an adapter has been loaded)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def route(model, rows: list[str | None], merged) -> tuple:
    """The context to run one call in, and extra ``generate`` keyword arguments.

    Args:
        model: the session's model.
        rows: the PEFT-side adapter name of every batch row (None: the base model).
        merged: the session's ``MergedWeights`` (reused merged copies).
    """
    uniform = len(set(rows)) == 1
    if uniform and rows[0] and can_merge(model, rows[0]):
        return merged.use(model, rows[0]), {}  # chat, evaluation: one adapter
    if uniform:  # the base (or an adapter that cannot merge): set for this call only
        return set_adapter(model, rows[0]), {}
    if can_mask(model, [r for r in rows if r]):  # compare: rows masked (row_routing.py)
        return masked_rows(model, rows), {}
    # LoRA variants, non-Linear layers: PEFT routes each row itself
    return nullcontext(), {"adapter_names": [r or BASE for r in rows]}


@contextmanager
def set_adapter(model, peft_name: str | None):
    """Inside the session lock: PEFT's active adapter is ``peft_name`` (None:
    adapter layers off)."""
    if not is_peft(model):
        yield
    elif peft_name is None:
        with model.disable_adapter():
            yield
    else:
        model.set_adapter(peft_name, inference_mode=True)
        yield


def drop_adapter_name_hooks(model) -> None:
    """Remove PEFT's ``adapter_names`` hooks left behind by a generate call that raised."""
    # PEFT removes its adapter_names hooks only when generate returns normally; after an
    # exception they would stay and steer the next call.
    for module in model.modules():
        for key, hook in list(module._forward_pre_hooks.items()):
            if "adapter_names" in getattr(hook, "keywords", {}):
                del module._forward_pre_hooks[key]
                module._forward_pre_hooks_with_kwargs.pop(key, None)
