"""Which models the batching scheduler can batch, decided before any request is decoded.

The running batch (``batch_cache.py``) joins full-attention dynamic cache layers only: a
sliding-window layer keeps just its last ``window`` columns, so rows that joined at different
times would no longer line up. Attention soft-capping is left out too: no test proves a
padded, batched row equal to its solo answer there. Such a model is answered one request at a
time by plain ``generate`` (``solo.py``), which is correct by construction, and its answers
are labelled ``unbatched``.
"""

from __future__ import annotations


def batching_refusal(model) -> str | None:
    """Why the scheduler cannot batch ``model`` (a transformers or PEFT model), or None."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    try:
        layers = DynamicCache(config=config).layers
    except Exception as err:  # a cache transformers cannot describe up front: not batched
        return f"its cache could not be built ahead ({type(err).__name__})"
    others = {type(layer) for layer in layers if type(layer) is not DynamicLayer}
    if any(getattr(kind, "is_sliding", False) for kind in others):
        return "sliding-window attention"
    if others:
        return "cache layers " + ", ".join(sorted(kind.__name__ for kind in others))
    if getattr(config, "attn_logit_softcapping", None):
        return "attention soft-capping"
    return None
