"""The PyTorch answers of an evaluation: every prompt, base and adapters, in batched calls.

Each ``generate`` call answers ``batch_size`` prompts with every model at once (PEFT
``adapter_names``, left padding, greedy by default), so the call count is
``ceil(rows / batch_size)`` whatever the number of adapters. The llama.cpp engine
(:mod:`eval.engines`) returns the same :class:`Generated` records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.templates import end_of_turn_ids
from inference.generate import GenerationSettings
from inference.session import ModelSession

BASE_LABEL = "base"


@dataclass
class Generated:
    """One model's answer to one prompt."""

    text: str
    tokens: int  # generated tokens, end-of-turn not counted
    stopped: bool  # True: ended its turn; False: cut at max_new_tokens


def answer_all(
    session: ModelSession,
    prompt_ids: list[list[int]],
    adapters: list[str],
    settings: GenerationSettings,
    batch_size: int,
    on_batch: Callable[[int, int], None] | None = None,
) -> dict[str, list[Generated]]:
    """Answer every prompt with the base model and each adapter.

    Prompts of similar length share a call (less padding); every call holds
    ``batch_size`` prompts x (1 + len(adapters)) rows.

    Returns:
        ``{"base": [...], adapter: [...]}``, answers in prompt order.
    """
    names = [None, *adapters]
    labels = [BASE_LABEL, *adapters]
    out = {label: [None] * len(prompt_ids) for label in labels}
    order = sorted(range(len(prompt_ids)), key=lambda i: -len(prompt_ids[i]))
    kwargs = generate_kwargs(session, settings)
    stop = set(kwargs["eos_token_id"])
    total = -(-len(order) // batch_size)
    for n, start in enumerate(range(0, len(order), batch_size), 1):
        chunk = order[start : start + batch_size]
        inputs = left_pad(
            [prompt_ids[i] for i in chunk for _ in names], session.tokenizer.pad_token_id
        )
        rows = session.generate(
            inputs, [a for _ in chunk for a in names], seed=settings.seed, **kwargs
        )
        new = rows[:, inputs["input_ids"].shape[1] :].tolist()
        for j, ids in enumerate(new):
            out[labels[j % len(names)]][chunk[j // len(names)]] = decode(session, ids, stop)
        if on_batch:
            on_batch(n, total)
    return out


def left_pad(ids: list[list[int]], pad_id: int) -> dict:
    """A left-padded batch: generation appends new tokens at the right end of every row."""
    import torch

    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, width - len(x) :] = torch.tensor(x, dtype=torch.long)
        mask[row, width - len(x) :] = 1
    return {"input_ids": input_ids, "attention_mask": mask}


def generate_kwargs(session: ModelSession, settings: GenerationSettings) -> dict:
    """``generate`` arguments for ``settings``, as inference.generate builds them for chat."""
    tokenizer = session.tokenizer
    eos = session.model.generation_config.eos_token_id
    stop = end_of_turn_ids(tokenizer)
    stop += [
        i for i in (eos if isinstance(eos, list) else [eos]) if i is not None and i not in stop
    ]
    kwargs = {
        "max_new_tokens": settings.max_new_tokens,
        "do_sample": not settings.greedy,
        "eos_token_id": stop,
        "pad_token_id": tokenizer.pad_token_id,
        "repetition_penalty": settings.repetition_penalty,
    }
    if settings.min_new_tokens:
        kwargs["min_new_tokens"] = settings.min_new_tokens
    if not settings.greedy:
        kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k)
    return kwargs


def decode(session: ModelSession, ids: list[int], stop: set[int]) -> Generated:
    """The answer in generated token ids: cut at the first of ``stop``, control tokens dropped."""
    end = next((i for i, t in enumerate(ids) if t in stop), None)
    kept = ids if end is None else ids[:end]
    text = session.tokenizer.decode(kept, skip_special_tokens=True)
    return Generated(text=text, tokens=len(kept), stopped=end is not None)
