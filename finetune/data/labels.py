"""Label constants and the single-exchange fitting rule, shared by single- and multi-turn rows.

Its own module so that ``format`` (single-turn) and ``conversations`` (multi-turn) both use it
without importing each other.
"""

from __future__ import annotations

IGNORE_INDEX = -100  # label value the cross-entropy loss skips


def fit(
    prompt_ids: list[int], reply_ids: list[int], eot: int, max_length: int, truncation: str
) -> tuple[list[int], list[int], str]:
    """Join prompt, reply and end-of-turn into ``(input_ids, labels, status)`` within max_length.

    A prompt with no room for one reply token and the end-of-turn token is dropped under
    either policy; ``truncate_response`` cuts the reply (keeping the end-of-turn token last),
    ``drop`` drops the row.
    """
    n_prompt = len(prompt_ids)
    if n_prompt + 2 > max_length:
        return [], [], "prompt_too_long"
    status = "ok"
    if n_prompt + len(reply_ids) + 1 > max_length:
        if truncation == "drop":
            return [], [], "too_long"
        reply_ids = reply_ids[: max_length - n_prompt - 1]
        status = "truncated"
    ids = list(prompt_ids) + list(reply_ids) + [eot]
    labels = [IGNORE_INDEX] * n_prompt + list(reply_ids) + [eot]
    return ids, labels, status
