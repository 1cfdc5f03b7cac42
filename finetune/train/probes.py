"""Probe prompts: fixed support questions answered greedily during training so the user
watches the model learn (the answers go out as events)."""

from __future__ import annotations

import torch

from finetune.templates import end_of_turn_ids, render_prompt

PROBE_PROMPTS = [
    "hi, where is my order {{Order Number}}? it hasnt arrived",
    "I want my money back for a damaged item",
    "can I talk to a real person please",
]


@torch.inference_mode()
def answer_probes(model, tokenizer, system_prompt: str | None = None, max_new_tokens: int = 48) -> list[dict]:
    """Greedy answers to :data:`PROBE_PROMPTS` in one left-padded batch."""
    was_training = model.training
    model.eval()
    texts = []
    for prompt in PROBE_PROMPTS:
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
        texts.append(render_prompt(tokenizer, messages + [{"role": "user", "content": prompt}]))
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in enc.items()}
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=end_of_turn_ids(tokenizer), pad_token_id=tokenizer.pad_token_id)
    model.train(was_training)
    new = out[:, enc["input_ids"].shape[1]:]
    return [{"prompt": p, "answer": tokenizer.decode(row, skip_special_tokens=True).strip()}
            for p, row in zip(PROBE_PROMPTS, new, strict=True)]
