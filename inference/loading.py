"""Putting weights into memory for the session: the base model, and one adapter into it.

Both are plain functions over the model object; :class:`inference.session.ModelSession`
calls them under its lock and keeps the results.
"""

from __future__ import annotations

from pathlib import Path

from adapters.shelf.adapter_folder import WEIGHTS
from core import models
from inference.routing import is_peft


def load_tokenizer(resolved: models.ResolvedModel):
    """The base model's left-padding tokenizer for serving, without its weights."""
    from transformers import AutoTokenizer

    # trust_remote_code=False, not left unset: unset, transformers asks on stdin (and
    # runs the model's own code on "y"); serving never runs code shipped with a model.
    tokenizer = AutoTokenizer.from_pretrained(resolved.path, trust_remote_code=False)
    tokenizer.padding_side = "left"  # batched generation appends to the right end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(resolved: models.ResolvedModel, device: str, dtype: str):
    """The base model for serving, in eval mode on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        resolved.path,
        dtype=getattr(torch, dtype),
        attn_implementation="sdpa",
        trust_remote_code=False,  # as for the tokenizer
    )
    model.to(device).eval()
    return model


def inject_adapter(model, name: str, peft_name: str, folder: Path, device: str):
    """Add the adapter's LoRA layers and weights; on failure leave the model as it was.

    Returns:
        The model to keep: a ``PeftModel`` (the same base object inside).

    Raises:
        ValueError: the adapter could not be loaded (the reason and folder are named).
    """
    from peft import PeftConfig, PeftModel

    wrapped = None
    try:
        if not is_peft(model):
            # PeftModel.from_pretrained in two steps, so a failure can be rolled back: the
            # constructor injects LoRA layers into the shared base model in place.
            config = PeftConfig.from_pretrained(str(folder))
            config.inference_mode = True
            model = wrapped = PeftModel(
                model, config, adapter_name=peft_name, low_cpu_mem_usage=True
            )
        # low_cpu_mem_usage: LoRA weights start on the meta device, no throwaway init; so a
        # tensor missing from the file must be an error, or it would stay on "meta".
        result = model.load_adapter(
            str(folder),
            adapter_name=peft_name,
            is_trainable=False,
            low_cpu_mem_usage=True,
            torch_device=device,
        )
        if result.missing_keys:
            raise ValueError(
                f"{WEIGHTS} lacks {len(result.missing_keys)} LoRA tensors, "
                f"e.g. {result.missing_keys[0]}"
            )
    except Exception as err:
        if wrapped is not None:
            wrapped.unload()  # strips the injected layers; the base is as it was
        elif is_peft(model) and peft_name in model.peft_config:
            model.delete_adapter(peft_name)
        raise ValueError(
            f"adapter {name!r} could not be loaded: {type(err).__name__}: "
            f"{str(err)[:300]} (folder {folder})"
        ) from err
    return model  # load_adapter(is_trainable=False) already put it in eval mode
