"""Text a user typed, as messages show it and as the tokenizer needs it. No torch.

Two rules every entry point shares:

- A refusal quotes what the user typed, cut to a readable length (:func:`quote`): a
  5,000-character name is named by its first characters and its length, never echoed whole.
- Text that is not valid Unicode (a lone surrogate such as ``"\\ud800"``, which JSON and
  Gradio let through) is refused with a sentence (:func:`check_unicode`) before it reaches a
  tokenizer, which would otherwise raise a ``TypeError`` the user cannot act on.
"""

from __future__ import annotations

import re

QUOTE_LIMIT = 120  # characters of user input a message repeats; the rest is counted, not shown


def quote(value, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of user input, cut to about ``limit`` characters with its full length named.

    Args:
        value: what the user typed (any object; non-strings are shown by ``repr``).
        limit: characters kept from the start of the value.

    Example:
        ``quote("x" * 5000)`` gives ``'xxxx…xx' (5,000 characters)``: the first 80 and the
        last 40 characters.
    """
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value)
    return f"{_ends(text, limit)!r} ({len(text):,} characters)"


def cut(text: str, limit: int = QUOTE_LIMIT) -> str:
    """:func:`quote` without the quotation marks, for text shown as it is (a path)."""
    return text if len(text) <= limit else f"{_ends(text, limit)} ({len(text):,} characters)"


def _ends(text: str, limit: int) -> str:
    # The start and the end: a path's file name, a Hub id's model name are at the end.
    tail = limit // 3
    return text[: limit - tail] + "…" + text[-tail:]


def unicode_problem(text: str) -> int | None:
    """Index of the first character that cannot be encoded as UTF-8, or None when all can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


def replace_invalid(text: str) -> str:
    """``text`` with each character UTF-8 cannot hold replaced by U+FFFD (safe to send back)."""
    if unicode_problem(text) is None:
        return text
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def check_unicode(text: str, what: str = "the message") -> str:
    """Return ``text`` when it is valid Unicode; otherwise raise a sentence saying where.

    Raises:
        ValueError: ``text`` holds a lone surrogate (or another code point UTF-8 cannot hold).
    """
    at = unicode_problem(text)
    if at is not None:
        raise ValueError(
            f"{what} contains a character that is not valid Unicode (a lone surrogate, "
            f"U+{ord(text[at]):04X}, at character {at + 1:,}); remove it and try again"
        )
    return text


def check_messages_unicode(messages: list[dict]) -> None:
    """:func:`check_unicode` on every message's text, naming the message by its role.

    Raises:
        ValueError: the first message holding text that is not valid Unicode.
    """
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            role = msg.get("role", "?")
            check_unicode(
                content, f"message {i + 1} ({role})" if len(messages) > 1 else "the message"
            )


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (a folder name's undecodable bytes, kept as lone
    surrogates) spelled as escapes, the way the CLI prints it: safe for a page or JSON."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# A Python exception's class name as a prefix ("RuntimeError: ", "httpx.ReadTimeout: ").
_CLASS_NAME = re.compile(
    r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Timeout|Interrupt|Exit)\b:?\s*"
)
# An absolute path (POSIX): kept as its last part, so the user still knows which file.
_ABSOLUTE = re.compile(r"(?<![\w.:/])/(?:[^\s/'\"`,;:()]+/)+([^\s/'\"`,;:()]*)")


def public_text(text: str) -> str:
    """``text`` as a user off localhost may see it: no traceback, no exception class names,
    absolute paths cut to their last part (``.../train.jsonl``).

    Example:
        ``public_text("the answer failed: RuntimeError: /srv/td/models/x.bin is gone")`` gives
        ``"the answer failed: …/x.bin is gone"``.
    """
    text = str(text).split("Traceback (most recent call last)")[0].rstrip()
    text = _CLASS_NAME.sub("", text)
    return _ABSOLUTE.sub(lambda m: f"…/{m.group(1)}" if m.group(1) else "…", text)


def shown_error(err) -> str:
    """An error's text for the user: whole on localhost, :func:`public_text` when this process
    serves users off localhost (:func:`core.hosts.exposed`)."""
    from core.hosts import exposed

    return public_text(str(err)) if exposed() else str(err)
