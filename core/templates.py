"""Prompt rendering: one place that turns chat messages into the text a model continues.

Models with a chat template (SmolLM2, Qwen, Llama-3 ...) use it. Models without one (GPT-2)
get the instruction format the data pipeline trains on (``finetune.data.format``), so a
fallback model is prompted exactly as it was tuned::

    {system}\\n\\n                 (only with a system message)
    ### Instruction:\\n{prompt}\\n\\n
    ### Response:\\n               (the answer follows, ended by the eos token)
"""

from __future__ import annotations

import functools
import re

from core.user_text import check_messages_unicode

FALLBACK_PROMPT = "### Instruction:\n{prompt}\n\n### Response:\n"
ROLES = ("system", "user", "assistant")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>")
# Passed to every chat template: a support answer comes without a reasoning block. Qwen3's
# template then ends the prompt with an empty "<think>\n\n</think>\n\n", the same block it
# writes before a finished conversation's last answer, so training learns the answer alone and
# the answer starts where it was trained to; templates without the variable ignore it.
TEMPLATE_OPTIONS = {"enable_thinking": False}
# The control-token spellings the chat templates TuneDesk serves share (ChatML, Llama 3, Gemma,
# Phi, Mistral): what text is checked for when no tokenizer is at hand (a passage on the shelf,
# a correction exported for whatever base model trains next); with one, its own special tokens.
COMMON_CONTROL = re.compile(
    r"<\|[A-Za-z0-9_]{1,40}\|>|<start_of_turn>|<end_of_turn>|</?s>|\[/?INST\]"
)


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
    ``### Response:\\n{answer}\\n\\n`` (as ``finetune.data.format`` does for history).

    Raises:
        ValueError: listing every problem with ``messages``.
    """
    problems = check_messages(messages)
    if problems:
        raise ValueError("cannot render the prompt: " + "; ".join(problems))
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **TEMPLATE_OPTIONS
        )
    parts = []
    for msg in messages[:-1]:
        if msg["role"] == "system":
            parts.append(f"{msg['content']}\n\n")
        elif msg["role"] == "user":
            parts.append(f"### Instruction:\n{msg['content']}\n\n")
        else:
            parts.append(f"### Response:\n{msg['content']}\n\n")
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


# -- tokenizing a conversation: only the template's own markers become control tokens ------

_MARK = "\ue000{}\ue001"  # private-use characters: a placeholder no template rewrites
_MARK_RE = re.compile("\ue000(\\d+)\ue001")


def encode_chat(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    """Render a conversation with the chat template and tokenize it for the model.

    Text inside messages (what a customer typed, a training row) is always ordinary text:
    ``"<|im_start|>system"`` typed by a user becomes the tokens of those characters, never
    the control token, so nobody can type a fake system or assistant turn. Only the markers
    the template itself writes are control tokens. A conversation without control-token
    strings gets exactly the ids of ``tokenizer(rendered, add_special_tokens=False)``.

    Every engine that feeds a conversation to a model (PyTorch chat, compare, evaluation,
    training rows, an API server, llama.cpp) calls this and hands the ids to the model.

    Args:
        tokenizer: a Hugging Face tokenizer (fast or slow).
        messages: ``[{"role", "content"}, ...]``; with ``add_generation_prompt`` the last
            one comes from the user.
        add_generation_prompt: end where the assistant's answer starts (chat, evaluation);
            False renders a finished conversation (a training row with its answer).

    Returns:
        Token ids; models without a chat template get the fallback prompt with the
        tokenizer's own BOS (and never a trailing eos).

    Raises:
        ValueError: a malformed message list, or text that is not valid Unicode.
    """
    return encode_chats(tokenizer, [messages], add_generation_prompt)[0]


def encode_chats(
    tokenizer, conversations: list[list[dict]], add_generation_prompt: bool = True
) -> list[list[int]]:
    """:func:`encode_chat` for several conversations; plain ones are tokenized in one call."""
    for messages in conversations:
        _check_shape(messages, add_generation_prompt)
        check_messages_unicode(messages)
    if not has_chat_template(tokenizer):
        return [_fallback_ids(tokenizer, m, add_generation_prompt) for m in conversations]
    texts = [
        tokenizer.apply_chat_template(
            m, tokenize=False, add_generation_prompt=add_generation_prompt, **TEMPLATE_OPTIONS
        )
        for m in conversations
    ]
    pattern = _control_pattern(tokenizer)
    plain = [i for i, m in enumerate(conversations) if not _holds_control(pattern, m)]
    out: list[list[int] | None] = [None] * len(conversations)
    if plain:  # the common case: the rendered text's control tokens are all the template's
        ids = tokenizer([texts[i] for i in plain], add_special_tokens=False)["input_ids"]
        for i, row in zip(plain, ids, strict=True):
            out[i] = list(row)
    for i, messages in enumerate(conversations):
        if out[i] is None:
            out[i] = _escaped_ids(tokenizer, pattern, messages, texts[i], add_generation_prompt)
    return out


def control_strings(tokenizer, text: str) -> list[str]:
    """The control-token strings (``<|im_start|>``, ``<|endoftext|>`` ...) found in ``text``."""
    pattern = _control_pattern(tokenizer)
    return pattern.findall(text) if pattern is not None and isinstance(text, str) else []


def first_control(tokenizer, texts) -> str | None:
    """The label of the first text that spells one of ``tokenizer``'s control tokens, or None.

    Args:
        tokenizer: a Hugging Face tokenizer (its special added tokens are the control tokens).
        texts: ``(label, text)`` pairs: every text of a conversation that reaches the prompt.
    """
    pattern = _control_pattern(tokenizer)
    if pattern is None:
        return None
    return next(
        (label for label, text in texts if isinstance(text, str) and pattern.search(text)), None
    )


def control_sentence(label: str) -> str:
    """The refusal of text spelling a control token, naming where it is
    (``messages[0].content``)."""
    return f"{label} spells a control token of the model's chat template; remove it"


def _check_shape(messages: list[dict], add_generation_prompt: bool) -> None:
    problems = check_messages(messages)
    if not add_generation_prompt:  # a finished conversation ends with the answer
        problems = [p for p in problems if not p.startswith("the last message must come")]
    if problems:
        raise ValueError("cannot render the prompt: " + "; ".join(problems))


@functools.lru_cache(maxsize=8)  # per tokenizer object: building it walks the added tokens
def _control_pattern(tokenizer) -> re.Pattern | None:
    """A regex for the tokenizer's special added tokens, longest first; None if it has none."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    specials = {t.content for t in decoder.values() if getattr(t, "special", False)}
    specials |= {t for t in getattr(tokenizer, "all_special_tokens", []) if t}
    if not specials:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))


def _holds_control(pattern: re.Pattern | None, messages: list[dict]) -> bool:
    return pattern is not None and any(pattern.search(m["content"]) for m in messages)


def _escaped_ids(
    tokenizer, pattern: re.Pattern, messages: list[dict], rendered: str, add_generation_prompt: bool
) -> list[int]:
    """Tokenize with message text as plain text and template markers as control tokens.

    The template is rendered once more with a placeholder for each message's text, which
    tells template text from message text. Text between control tokens is tokenized on its
    own, as a fast tokenizer does anyway, so ordinary text gets the same ids either way.
    """
    marked = [{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)]
    skeleton = tokenizer.apply_chat_template(
        marked, tokenize=False, add_generation_prompt=add_generation_prompt, **TEMPLATE_OPTIONS
    )
    contents = [m["content"] for m in messages]
    if (
        _fill(skeleton, contents) != rendered
        and _fill(skeleton, [c.strip() for c in contents]) == rendered
    ):
        contents = [c.strip() for c in contents]  # the template trims message text (Llama-3, Gemma)
    pieces: list[str | int] = []  # text, or a control-token id
    for k, part in enumerate(_MARK_RE.split(skeleton)):
        if k % 2:  # odd pieces are placeholder numbers: the message's own text, kept as text
            pieces.append(contents[int(part)])
            continue
        at = 0
        for found in pattern.finditer(part):
            pieces += [part[at : found.start()], tokenizer.convert_tokens_to_ids(found.group())]
            at = found.end()
        pieces.append(part[at:])
    return _tokenize_pieces(tokenizer, pieces)


def _fill(skeleton: str, contents: list[str]) -> str:
    return _MARK_RE.sub(lambda m: contents[int(m.group(1))], skeleton)


def _tokenize_pieces(tokenizer, pieces: list[str | int]) -> list[int]:
    ids: list[int] = []
    text = ""
    for piece in [*pieces, None]:
        if isinstance(piece, str):
            text += piece  # neighbouring template and message text tokenize together, as usual
            continue
        if text:
            ids += tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            text = ""
        if piece is not None:
            ids.append(piece)
    return ids


def _fallback_ids(tokenizer, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    """The instruction format for template-less models; every character is text here."""
    if add_generation_prompt:
        text = render_prompt(tokenizer, messages)
    else:
        text = render_prompt(tokenizer, messages[:-1]) + messages[-1]["content"]
    ids = tokenizer(text, split_special_tokens=True)["input_ids"]  # the tokenizer's BOS, if any
    # Some tokenizers append eos to every text; in a prompt it would teach "stop here".
    return ids[:-1] if ids and ids[-1] == tokenizer.eos_token_id else list(ids)
