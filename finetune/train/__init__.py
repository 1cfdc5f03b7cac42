"""Training: ``train(config, on_event, stop)`` and what it is built from.

``setup`` checks the config and loads data, model and LoRA; ``loop`` is ``train()`` itself
(setup -> loop -> finish); ``steps`` holds one step's mechanics (plan, loss, backward,
optimizer step); ``loading``, ``fused`` and ``lean_lora`` load the model and make its
training lean; ``saving`` writes adapters and checkpoints; ``probes`` answers fixed prompts
during training; ``dryrun`` estimates memory and times one step; ``runner`` supervises
training as a child process; ``allocator`` re-executes it under tcmalloc.
"""

__all__ = ["ConfigError", "TrainResult", "train"]


def __getattr__(name: str):
    # Lazy, so that `finetune.train.runner` (the UI, `python -m finetune runs`) and the other
    # light submodules can be imported without importing torch.
    if name in __all__:
        from finetune.train import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
