"""Multi-turn conversations: parse a message list, label every assistant turn, fit max_length.

A conversation is trained as one example: its whole text, rendered by the model's chat
template (or the fallback instruction format), with every assistant turn's tokens plus the
end-of-turn token that closes it labelled, and everything else (system, user turns, role
headers) set to ``IGNORE_INDEX``. With ``last_turn_only`` the same tokens are kept but only
the final answer is labelled (earlier turns are context). Models without a chat template
render earlier answers without an end-of-turn token, so their turns cannot be told apart:
:func:`encode` returns None and the caller trains the last turn alone.

Turn spans are found by encoding the prompt before each assistant turn
(``core.templates.encode_chat``, what chat uses) and checking that it is a token prefix
of the whole conversation; the turn then runs to the last end-of-turn token before the next
prompt. A conversation longer than ``max_length`` loses its oldest exchanges (user question
plus answer) first, keeping the system message; if the last exchange alone is too long, the
single-turn policy (``finetune.data.labels.fit``) applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune.data.labels import IGNORE_INDEX, fit

MAX_MESSAGE_CHARS = 1_000_000  # one message; support messages are a few KB, a MB is an export error
# ``role``/``from`` values accepted (OpenAI chat, ShareGPT and a few common spellings).
ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "customer": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "agent": "assistant",
}


class BadConversation(ValueError):
    """A message list that cannot be trained on; ``reason`` is the counter key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def parse_messages(value, col: str = "messages") -> list[dict]:
    """Validated ``[{role, content}]`` turns from an OpenAI or ShareGPT message list.

    Leading system messages are kept; after them user and assistant turns must alternate,
    starting with the user. Trailing user turns (an unanswered last question) are dropped:
    they teach nothing. Content given as OpenAI text parts is joined.

    Raises:
        BadConversation: with reason ``bad_messages``, ``too_large``, ``no_assistant_turn``
            or ``roles_out_of_order`` and a sentence naming the message.
    """
    if not isinstance(value, list) or not value:
        raise BadConversation(
            "bad_messages", f"{col} is not a non-empty list of {{role, content}} messages"
        )
    turns = [_turn(msg, f"{col}[{i}]") for i, msg in enumerate(value)]
    while turns and turns[-1]["role"] == "user":
        turns.pop()
    if not any(t["role"] == "assistant" for t in turns):
        raise BadConversation("no_assistant_turn", f"{col} has no assistant turn to learn from")
    body = turns[_system_count(turns) :]
    for i, turn in enumerate(body):
        expected = "user" if i % 2 == 0 else "assistant"
        if turn["role"] != expected:
            raise BadConversation(
                "roles_out_of_order",
                f"{col}: turn {i + 1} after the system message is from the {turn['role']}, "
                f"expected the {expected} (user and assistant must alternate, user first)",
            )
    return turns


@dataclass
class Encoded:
    """One tokenized conversation."""

    input_ids: list[int]
    labels: list[int]
    status: str  # "ok", "oldest_turns_dropped", or a data.format.STATUSES drop reason
    turns_dropped: int = 0  # exchanges cut from the start to fit max_length


def encode(fmt, messages: list[dict], max_length: int, truncation: str, last_turn_only: bool):
    """Tokenize a whole conversation (ending with an assistant turn) for training.

    Args:
        fmt: a ``finetune.data.format.ChatFormat`` (tokenizer, template, end-of-turn id).
        messages: system?, then alternating user/assistant turns, last from the assistant.
        max_length: most tokens in the example.
        truncation: ``truncate_response`` or ``drop``, for a last exchange that alone is too long.
        last_turn_only: label only the final answer.

    Returns:
        An :class:`Encoded`, or None when the template's text cannot be split into turns
        (the caller then encodes the last turn alone).
    """
    system, exchanges = _split(messages)
    full = _spans(fmt, messages, last_turn_only)
    if full is None:
        return None
    ids, labels, starts = full
    if len(ids) <= max_length:
        return Encoded(ids, labels, "ok")
    # Cheapest cut that fits by the first encoding's token positions, checked by re-encoding
    # (a template may render the system header differently once turns are gone).
    drop = next(
        (d for d in range(1, len(exchanges)) if len(ids) - (starts[d] - starts[0]) <= max_length),
        len(exchanges) - 1,
    )
    while drop < len(exchanges):
        kept = system + [m for pair in exchanges[drop:] for m in pair]
        cut = _spans(fmt, kept, last_turn_only)
        if cut is None:
            return None
        if len(cut[0]) <= max_length or drop == len(exchanges) - 1:
            break
        drop += 1
    ids, labels, _ = cut
    if len(ids) <= max_length:
        return Encoded(ids, labels, "oldest_turns_dropped", drop)
    return _fit_last(fmt, ids, labels, max_length, truncation, drop)


def trained_turns(labels: list[int]) -> int:
    """Number of labelled spans (one per trained assistant turn)."""
    runs, inside = 0, False
    for t in labels:
        if t != IGNORE_INDEX and not inside:
            runs += 1
        inside = t != IGNORE_INDEX
    return runs


def _turn(msg, where: str) -> dict:
    if not isinstance(msg, dict):
        raise BadConversation("bad_messages", f"{where} is not a {{role, content}} dict")
    role = ROLES.get(str(msg.get("role", msg.get("from", ""))).strip().lower())
    if role is None:
        raise BadConversation(
            "bad_messages", f"{where} has an unknown role (use system, user or assistant)"
        )
    content = msg.get("content", msg.get("value"))
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": ...}]
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        content = "\n".join(t for t in texts if isinstance(t, str)) if texts else None
    if not isinstance(content, str) or not content.strip():
        raise BadConversation("bad_messages", f"{where} ({role}) has no text")
    if len(content) > MAX_MESSAGE_CHARS:
        raise BadConversation(
            "too_large",
            f"{where} ({role}) holds {len(content) / 1e6:.1f} M characters; one message may "
            f"hold at most {MAX_MESSAGE_CHARS / 1e6:.0f} M",
        )
    return {"role": role, "content": content.strip()}


def _system_count(turns: list[dict]) -> int:
    n = 0
    while n < len(turns) and turns[n]["role"] == "system":
        n += 1
    return n


def _split(messages: list[dict]) -> tuple[list[dict], list[tuple[dict, dict]]]:
    """(leading system messages, [(user, assistant), ...])."""
    n = _system_count(messages)
    body = messages[n:]
    return messages[:n], [(body[i], body[i + 1]) for i in range(0, len(body) - 1, 2)]


def _prompt_ids(fmt, messages: list[dict]) -> list[int]:
    from core.templates import encode_chat

    return encode_chat(fmt.tokenizer, messages, add_generation_prompt=True)


def _full_ids(fmt, messages: list[dict]) -> list[int]:
    """A finished conversation (last turn from the assistant), closed by its end-of-turn token."""
    from core.templates import encode_chat

    ids = encode_chat(fmt.tokenizer, messages, add_generation_prompt=False)
    # The fallback format has no end-of-turn marker of its own: eos closes the answer.
    return ids if fmt.has_template else ids + [fmt.end_of_turn_id]


def _spans(fmt, messages: list[dict], last_turn_only: bool):
    """(input_ids, labels, start of each exchange) or None when turns cannot be located."""
    try:
        full = _full_ids(fmt, messages)
        answers = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
        prompts = [_prompt_ids(fmt, messages[:k]) for k in answers]
        # The conversation through each answer: that answer ends at its last end-of-turn token.
        throughs = [_full_ids(fmt, messages[: k + 1]) for k in answers[:-1]] + [full]
    except Exception:  # jinja2 TemplateError, ValueError from render_prompt
        return None
    labels = [IGNORE_INDEX] * len(full)
    ends = []  # index just past each answer's end-of-turn token
    for i, (p, through) in enumerate(zip(prompts, throughs, strict=True)):
        if full[: len(p)] != p or full[: len(through)] != through:
            return None
        tail = through[len(p) :]
        # The last one: a reply quoting "<|im_end|>" text must not end its span early.
        close = next(
            (j for j in range(len(tail) - 1, -1, -1) if tail[j] == fmt.end_of_turn_id), None
        )
        if not close:  # None, or an empty answer
            return None
        ends.append(len(p) + close + 1)
        if not last_turn_only or i == len(prompts) - 1:
            labels[len(p) : ends[-1]] = full[len(p) : ends[-1]]
    # Exchange d starts after answer d-1 (0 for the first): an over-estimate of what dropping
    # d exchanges saves, so the first d it says fits is never more than needed.
    return full[: ends[-1]], labels[: ends[-1]], [0] + ends[:-1]


def _fit_last(fmt, ids, labels, max_length, truncation, drop) -> Encoded:
    """The last exchange alone is over max_length: cut its answer or drop it (single-turn rule)."""
    first = next(i for i, t in enumerate(labels) if t != IGNORE_INDEX)  # only one exchange left
    prompt, reply = ids[:first], ids[first:-1]  # reply without its end-of-turn token
    new_ids, new_labels, status = fit(prompt, reply, fmt.end_of_turn_id, max_length, truncation)
    return Encoded(new_ids, new_labels, status, drop)


def conversation_stats(parts: dict, counts) -> dict:
    """Multi-turn counts for the dataset stats: conversations, turns trained, turns cut.

    Args:
        parts: {"train", "val"} tokenized datasets with ``history`` and ``labels`` columns.
        counts: encoding statuses counted over all rows.
    """
    conversations = turns = 0
    for part in parts.values():
        for history, labels in zip(part["history"][:], part["labels"][:], strict=True):
            conversations += bool(history)
            turns += trained_turns(labels)
    return {
        "conversations": conversations,
        "assistant_turns_trained": turns,
        "conversations_shortened": counts["oldest_turns_dropped"],
    }
