"""Prompt rendering: one place that turns chat messages into the text a model continues.

Models with a chat template (SmolLM2, Qwen, Llama-3 ...) use it. Models without one (GPT-2)
get the instruction format the data pipeline trains on (``finetune.data_format``), so a
fallback model is prompted exactly as it was tuned::

    {system}\\n\\n                 (only with a system message)
    ### Instruction:\\n{prompt}\\n\\n
    ### Response:\\n               (the answer follows, ended by the eos token)
"""

from __future__ import annotations

FALLBACK_PROMPT = "### Instruction:\n{prompt}\n\n### Response:\n"
ROLES = ("system", "user", "assistant")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


def has_chat_template(tokenizer) -> bool:
    """True when the tokenizer ships a chat template (so ``apply_chat_template`` works)."""
    return bool(getattr(tokenizer, "chat_template", None))


def check_messages(messages: list[dict]) -> list[str]:
    """Every problem with a message list (empty when it is usable).

    A usable list is non-empty, each item has a known ``role`` and string ``content``, and
    the last message comes from the user (the model answers it).
    """
    if not messages:
        return ["no messages: give at least one user message"]
    problems = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            problems.append(f"message {i} needs a role out of {ROLES}, got {msg!r:.80}")
        elif not isinstance(msg.get("content"), str):
            problems.append(f"message {i} ({msg['role']}) needs text content")
    if not problems and messages[-1]["role"] != "user":
        problems.append(f"the last message must come from the user, not {messages[-1]['role']!r}")
    return problems


def render_prompt(tokenizer, messages: list[dict]) -> str:
    """Render a conversation as prompt text that ends where the assistant's answer starts.

    With a chat template the text carries its own special tokens: encode it with
    ``add_special_tokens=False``. Without one, earlier assistant turns are rendered as
    ``### Response:\\n{answer}<eos>\\n\\n`` (as ``finetune.conversations`` trains them).

    Raises:
        ValueError: listing every problem with ``messages``.
    """
    problems = check_messages(messages)
    if problems:
        raise ValueError("cannot render the prompt: " + "; ".join(problems))
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = []
    for msg in messages[:-1]:
        if msg["role"] == "system":
            parts.append(f"{msg['content']}\n\n")
        elif msg["role"] == "user":
            parts.append(f"### Instruction:\n{msg['content']}\n\n")
        else:  # closed by eos, as multi-turn training labels it (finetune.conversations)
            parts.append(f"### Response:\n{msg['content']}{tokenizer.eos_token or ''}\n\n")
    return "".join(parts) + FALLBACK_PROMPT.format(prompt=messages[-1]["content"])


def end_of_turn_ids(tokenizer) -> list[int]:
    """Token ids that end an answer: the eos token plus any known end-of-turn marker.

    ChatML models end a turn with ``<|im_end|>``, which is not always the tokenizer's eos;
    generation must stop at either.
    """
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab and vocab[token] not in ids:
            ids.append(vocab[token])
    return ids
