"""The largest micro-batch that trains on a CUDA GPU at the configured max length.

``search_max_batch`` is the search alone (doubling, then bisection), over any ``fits(batch)``
predicate, so it is tested without a GPU. ``find_max_batch`` plugs in a real forward and
backward pass plus an optimizer step on worst-case batches: every example at ``max_length``
and, for TuneDesk, every token a label (the most logits its selective loss can compute).

On the CPU there is no out-of-memory error to catch (the kernel's OOM killer ends the process
instead), so the finder refuses with a sentence there.
"""

from __future__ import annotations

import gc

MAX_BATCH = 4096  # the largest batch size config validation accepts


def search_max_batch(fits, limit: int = MAX_BATCH) -> int:
    """Largest ``b`` in ``[1, limit]`` with ``fits(b)``, assuming fitting is monotonic.

    Doubles from 1 until a batch fails (or ``limit`` fits), then bisects between the last
    batch that fit and the first that did not: about 2 log2(answer) tries.

    Returns:
        The batch size, or 0 when not even a batch of 1 fits.
    """
    if limit < 1 or not fits(1):
        return 0
    good, bad = 1, None
    while bad is None:
        nxt = min(good * 2, limit)
        if nxt == good:
            return good
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def worst_case_batch(batch: int, length: int, vocab: int, packing: bool, device: str) -> dict:
    """``batch`` examples of ``length`` random tokens, every token a label."""
    import torch

    ids = torch.randint(0, vocab, (batch, length), device=device)  # (B, T)
    if packing:  # one padding-free row, positions restarting per example
        pos = torch.arange(length, device=device).repeat(batch)
        return {
            "input_ids": ids.reshape(1, -1),
            "labels": ids.reshape(1, -1),
            "position_ids": pos[None],
        }
    return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def _try_step(model, optimizer, batch: dict, selective: bool, autocast) -> bool:
    import contextlib

    import torch

    from finetune.train.steps import loss_sum

    try:
        with autocast() if autocast else contextlib.nullcontext():
            loss, n = loss_sum(model, batch, selective=selective)
        (loss / n).backward()
        optimizer.step()
        torch.cuda.synchronize()
        ok = True
    except torch.OutOfMemoryError:
        ok = False
    optimizer.zero_grad(set_to_none=True)
    return ok


def find_max_batch(
    cfg, recipe: str = "tunedesk", model=None, packing: bool | None = None, limit: int = MAX_BATCH
) -> int:
    """Largest micro-batch at ``cfg.data.max_length`` that runs one training step on the GPU.

    Args:
        cfg: a ``RunConfig`` on a CUDA device (precision, quantization, LoRA as training uses).
        recipe: "tunedesk" (packed when possible, selective logits) or "seed" (padded rows,
            logits on every position).
        model, packing: an already built LoRA model (e.g. random weights from a config);
            loaded as training loads it when None.
        limit: the largest batch tried (a quick check need not search to 4096).

    Raises:
        ValueError: the device is not a CUDA GPU, or the settings cannot run here.
    """
    import torch

    from core.hardware import detect
    from finetune.train.setup import check_config
    from finetune.train.steps import build_optimizer, make_autocast

    t = cfg.train
    device = detect().device(t.device).name
    if not device.startswith("cuda"):
        raise ValueError(
            f"finding the largest batch needs a CUDA GPU (device {device!r} was chosen): on the "
            "CPU running out of memory kills the process instead of raising an error; "
            "use --device cuda on a machine with a GPU"
        )
    check_config(cfg)
    if model is None:
        from core.models import resolve
        from finetune.train.setup import load_lora_model

        model, _, packing = load_lora_model(cfg, resolve(cfg.model.name), device)
    optimizer = build_optimizer(model, t.learning_rate, t.weight_decay, t.optimizer, device)
    vocab = model.get_input_embeddings().num_embeddings
    autocast = make_autocast(device, t.precision)
    model.train()

    def fits(b: int) -> bool:
        batch = worst_case_batch(
            b, cfg.data.max_length, vocab, bool(packing) and recipe == "tunedesk", device
        )
        ok = _try_step(model, optimizer, batch, recipe == "tunedesk", autocast)
        del batch
        gc.collect()
        torch.cuda.empty_cache()
        return ok

    return search_max_batch(fits, limit)
