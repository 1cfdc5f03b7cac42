"""Probe prompts: fixed support questions answered greedily during training so the user
watches the model learn (the answers go out as events)."""

from __future__ import annotations

from core.templates import end_of_turn_ids, render_prompt
from finetune.train.steps import no_grad

PROBE_PROMPTS = [
    "hi, where is my order {{Order Number}}? it hasnt arrived",
    "I want my money back for a damaged item",
    "can I talk to a real person please",
]


def answer_probes(
    model,
    tokenizer,
    system_prompt: str | None = None,
    max_new_tokens: int = 48,
    synced: bool = False,
    max_time: float | None = None,
) -> list[dict]:
    """Greedy answers to :data:`PROBE_PROMPTS` in one left-padded batch.

    Args:
        synced: every rank of an FSDP run calls this together, and each keeps decoding until
            all are done (a forward is a collective there; one rank stopping early would hang).
        max_time: stop generating after this many seconds (a time budget's last minute).
    """
    was_training = model.training
    model.eval()
    texts = []
    for prompt in PROBE_PROMPTS:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        texts.append(render_prompt(tokenizer, messages + [{"role": "user", "content": prompt}]))
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in enc.items()}
    with no_grad(model):
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=end_of_turn_ids(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            synced_gpus=synced,
            **({"max_time": max_time} if max_time else {}),
        )
    model.train(was_training)
    new = out[:, enc["input_ids"].shape[1] :]
    return [
        {"prompt": p, "answer": tokenizer.decode(row, skip_special_tokens=True).strip()}
        for p, row in zip(PROBE_PROMPTS, new, strict=True)
    ]
