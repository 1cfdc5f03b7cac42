"""Which models the batching scheduler can batch, decided before any request is decoded.

The running batch (``batch_cache.py``) joins full-attention dynamic cache layers. A
sliding-window model is batched too: its prefill starts from a full-attention cache
(``batch_cache.prefill_inputs``), so its layers keep every column and transformers masks each
layer's window from the config (measured equal to ``generate`` for tiny Mistral and Gemma 3,
tests/serve/test_every_request_ends.py). Other layer kinds (chunked, linear or recurrent
attention, static or quantized caches) and attention soft-capping are not batched: nothing
proves a padded, batched row equal to its solo answer there. Such a model is answered one
request at a time by plain ``generate`` (``solo.py``), correct by construction, and its
answers are labelled ``unbatched``.
"""

from __future__ import annotations

BATCHED_LAYER_TYPES = ("full_attention", "sliding_attention")


def batching_refusal(model) -> str | None:
    """Why the scheduler cannot batch ``model`` (a transformers or PEFT model), or None."""
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    others = sorted(
        {t for t in getattr(config, "layer_types", None) or () if t not in BATCHED_LAYER_TYPES}
    )
    if others:
        return "attention layers of kind " + ", ".join(others)
    try:
        layers = DynamicCache(config=config).layers
    except Exception as err:  # a cache transformers cannot describe up front: not batched
        return f"its cache could not be built ahead ({type(err).__name__})"
    kinds = {type(layer) for layer in layers} - {DynamicLayer, DynamicSlidingWindowLayer}
    if kinds:
        return "cache layers " + ", ".join(sorted(kind.__name__ for kind in kinds))
    if getattr(config, "attn_logit_softcapping", None):
        return "attention soft-capping"
    return None
