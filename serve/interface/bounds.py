"""How long a request may wait for its answer, and the error it gets when the wait runs out.

Two clocks bound every wait on an answer, whatever engine gives it: the idle clock (seconds
without progress: since the request was queued, since its last token, or, while it waits its
turn, since the engine's last step) and the whole answer's cap. When either runs out the
request is cancelled in its engine and its reader gets :class:`AnswerTimeout` (the API's 504).
Both come from ``TUNEDESK_ANSWER_IDLE_S`` and ``TUNEDESK_ANSWER_TIMEOUT_S``, which
``python -m serve`` and ``app.py`` also take as flags. No torch here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from core.user_text import shown_error

IDLE_ENV = "TUNEDESK_ANSWER_IDLE_S"
TOTAL_ENV = "TUNEDESK_ANSWER_TIMEOUT_S"
IDLE_S = 30.0  # no token (nor, while queued, an engine step) for this long: the engine is stuck
TOTAL_S = 600.0  # 2048 tokens at 4 tokens/s on 2 CPU cores fit; a stuck answer never takes longer


class AnswerTimeout(TimeoutError):
    """An answer made no progress within the idle bound, or ran past the whole-answer cap."""


class EngineStopping(RuntimeError):
    """The server is stopping (SIGTERM, Ctrl-C) before this answer was finished."""


@dataclass(frozen=True)
class AnswerBound:
    """The two clocks of one request's wait."""

    idle_s: float = IDLE_S  # seconds without progress before the request is cancelled
    total_s: float = TOTAL_S  # seconds from queueing to the end of the answer at most

    def check(self) -> None:
        """Raise one ``ValueError`` naming every bad value."""
        problems = [
            f"{name} must be a number of seconds above 0, got {value!r}"
            for name, value in (
                ("the idle timeout", self.idle_s),
                ("the answer timeout", self.total_s),
            )
            if not _positive(value)
        ]
        if problems:
            raise ValueError("; ".join(problems))


def answer_bound(idle_s: float | None = None, total_s: float | None = None) -> AnswerBound:
    """The bound from the arguments, else the environment, else the defaults.

    Raises:
        ValueError: a value (or an environment variable) that is not a positive number.
    """
    bound = AnswerBound(_seconds(idle_s, IDLE_ENV, IDLE_S), _seconds(total_s, TOTAL_ENV, TOTAL_S))
    bound.check()
    return bound


def set_answer_bound(idle_s: float | None, total_s: float | None) -> AnswerBound:
    """Check the flags' values and put them in the environment (engines read it per request).

    Raises:
        ValueError: a value that is not a positive number, in a sentence naming the flag.
    """
    bound = answer_bound(idle_s, total_s)
    os.environ[IDLE_ENV], os.environ[TOTAL_ENV] = repr(bound.idle_s), repr(bound.total_s)
    return bound


def timeout_error(bound: AnswerBound, idle: bool) -> AnswerTimeout:
    """The sentence a timed-out request gets."""
    if idle:
        return AnswerTimeout(
            f"the engine made no progress on this answer for {bound.idle_s:g} s "
            f"(the idle timeout, {IDLE_ENV}); the request was cancelled"
        )
    return AnswerTimeout(
        f"the answer took longer than {bound.total_s:g} s (the answer timeout, "
        f"{TOTAL_ENV}); the request was cancelled"
    )


def failure_sentence(err: BaseException) -> str:
    """What Chat and Compare show for an answer that failed in its engine (without the
    exception's class or the server's paths when the app serves users off localhost)."""
    if isinstance(err, AnswerTimeout | EngineStopping):
        return str(err)
    return shown_error(f"the answer failed: {type(err).__name__}: {err}")


def _seconds(given: float | None, env: str, default: float) -> float:
    if given is not None:
        return given
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{env} must be a number of seconds above 0, got {text!r}") from None


def _positive(value) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")
    )
