"""Perplexity on response tokens: exp(total NLL / number of scored tokens) over the whole set.

Examples are the training format: ``input_ids`` plus ``labels`` equal to the ids with -100 on
prompt tokens, so only the response and its end-of-turn token are scored. Totals are summed
over tokens, not averaged per batch, so the result does not depend on batch size or padding.
Works with any causal LM whose forward takes ``input_ids`` and ``attention_mask`` and returns
``.logits`` (plain transformers models and PEFT models alike).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def perplexity(
    model: torch.nn.Module,
    examples: list[dict],
    batch_size: int = 8,
    pad_token_id: int = 0,
) -> dict:
    """Perplexity of ``model`` on the response tokens of ``examples``.

    Args:
        model: A causal LM; put in eval mode for the call, then restored.
        examples: Dicts with ``input_ids: list[int]`` and ``labels: list[int]`` of the same
            length, labels -100 where a token is not scored.
        batch_size: Examples per forward pass; changes speed and memory, not the result.
        pad_token_id: Id used to right-pad; any valid id works because padded positions are
            masked from attention and never scored.

    Returns:
        ``{"perplexity": float, "nll": float, "tokens": int}`` where ``nll`` is the mean
        negative log-likelihood per scored token, in nats.

    Raises:
        ValueError: On no examples, a malformed example, or no scored token at all.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}")
    _check_examples(examples)
    batches = padded_batches(examples, batch_size, pad_token_id, _model_device(model))
    total_nll, tokens = response_nll(model, (batch for _, batch in batches))
    if tokens == 0:
        raise ValueError("no scored tokens: every label is -100 (is the response masked too?)")
    mean_nll = total_nll / tokens
    return {"perplexity": math.exp(mean_nll), "nll": mean_nll, "tokens": tokens}


def response_nll(model: torch.nn.Module, batches: Iterable[dict]) -> tuple[float, int]:
    """Summed NLL and count of scored tokens over padded batches.

    Args:
        model: A causal LM; put in eval mode for the call, then restored.
        batches: Dicts of (B, T) tensors ``input_ids``, ``attention_mask`` and ``labels``
            (labels aligned with ``input_ids``, -100 on prompt and padding).

    Returns:
        ``(total_nll, total_tokens)``; the NLL is summed in float64.
    """
    total_nll, total_tokens = 0.0, 0
    with scoring(model):
        for batch in batches:
            nll, tokens = _batch_nll(model, batch)
            total_nll += nll
            total_tokens += tokens
    return total_nll, total_tokens


def nll_per_row(
    model: torch.nn.Module, examples: list[dict], batch_size: int = 8, pad_token_id: int = 0
) -> dict:
    """Summed NLL of each example's response tokens, so a bootstrap can resample rows: the sums
    :func:`perplexity` adds up over the whole set, kept per row.

    Returns:
        ``{"nll": array (N,) summed nats per row, "tokens": array (N,) scored tokens}``.
    """
    sums, counts = np.zeros(len(examples)), np.zeros(len(examples), dtype=np.int64)
    with scoring(model):
        for rows, batch in padded_batches(examples, batch_size, pad_token_id, _model_device(model)):
            nll, tokens = _row_nll(model, batch)
            sums[rows], counts[rows] = nll.cpu().numpy(), tokens.cpu().numpy()
    return {"nll": sums, "tokens": counts}


@contextlib.contextmanager
def scoring(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode under ``torch.inference_mode`` for the block, then back in the
    mode it was in (training or not), whatever the block raised."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _batch_nll(model: torch.nn.Module, batch: dict) -> tuple[float, int]:
    """Summed NLL and scored-token count of one batch."""
    nll, tokens = _row_nll(model, batch)
    return nll.sum().item(), int(tokens.sum().item())


def _row_nll(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL (float64) and scored-token count of each row of one batch, each (B,)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # Token t is predicted from positions < t: drop the last logit and the first label.
    logits = logits[:, :-1, :]  # (B, T-1, V)
    targets = batch["labels"][:, 1:].to(logits.device)  # (B, T-1)
    keep = targets != IGNORE_INDEX
    per_token = torch.zeros(targets.shape, dtype=torch.float64, device=logits.device)
    # Select scored positions before upcasting: prompts and padding never reach float32,
    # which keeps memory at (scored tokens, V) instead of (B, T, V).
    scored = logits[keep].float()  # (N, V)
    per_token[keep] = F.cross_entropy(scored, targets[keep], reduction="none").double()
    return per_token.sum(dim=1), keep.sum(dim=1)


def padded_batches(
    examples: list[dict], batch_size: int, pad_token_id: int, device: torch.device
) -> Iterator[tuple[list[int], dict]]:
    """``(indices, batch)`` of right-padded batches of examples sorted longest first, to cut
    padding; ``indices`` are the batch rows' places in ``examples``.

    Longest first also makes an out-of-memory error show up on the first batch.
    """
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i]["input_ids"]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        chunk = [examples[i] for i in rows]
        width = max(len(ex["input_ids"]) for ex in chunk)
        input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, ex in enumerate(chunk):
            n = len(ex["input_ids"])
            input_ids[row, :n] = torch.tensor(ex["input_ids"], dtype=torch.long)
            labels[row, :n] = torch.tensor(ex["labels"], dtype=torch.long)
            attention_mask[row, :n] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        yield rows, {k: v.to(device) for k, v in batch.items()}


def _check_examples(examples: list[dict]) -> None:
    """Raise ValueError naming the first example that cannot be scored."""
    if not examples:
        raise ValueError("perplexity needs at least one example; got none")
    for i, ex in enumerate(examples):
        if "input_ids" not in ex or "labels" not in ex:
            raise ValueError(f"example {i} needs 'input_ids' and 'labels'; got {sorted(ex)}")
        if len(ex["input_ids"]) == 0:
            raise ValueError(f"example {i} has no tokens")
        if len(ex["input_ids"]) != len(ex["labels"]):
            raise ValueError(
                f"example {i}: input_ids has {len(ex['input_ids'])} tokens but labels has "
                f"{len(ex['labels'])}; they must line up one to one"
            )


def _model_device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for a parameter-free module)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")
