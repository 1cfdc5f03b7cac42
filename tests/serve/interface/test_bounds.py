"""The answer's bound: a ticket no engine writes to ends with AnswerTimeout within its idle
bound, and is cancelled; progress restarts the idle clock; the whole-answer cap holds anyway;
bad settings are refused in a sentence; Chat and Compare get a sentence, not a traceback."""

from __future__ import annotations

import threading
import time

import pytest

from serve.interface.bounds import AnswerBound, AnswerTimeout, answer_bound, failure_sentence
from serve.interface.ticket import Ticket, answers_together


def ticket(idle_s: float, total_s: float = 60.0) -> Ticket:
    return Ticket("base", 3, lambda _: 0, AnswerBound(idle_s, total_s))


def test_a_ticket_nobody_writes_to_times_out_and_is_cancelled():
    lost = ticket(0.3)
    start = time.perf_counter()
    with pytest.raises(AnswerTimeout, match="no progress on this answer for 0.3 s"):
        list(lost)
    # within its bound, and seconds short of the 60 s cap (a loaded CI machine wakes late)
    assert 0.25 < time.perf_counter() - start < 5 and lost.cancelled and lost.done
    with pytest.raises(AnswerTimeout):
        lost.text()  # the error stays


def test_progress_restarts_the_idle_clock_but_not_the_whole_answer_cap():
    slow = ticket(0.4, total_s=1.2)

    def engine():  # a token every 0.2 s, forever: never idle, always too long
        while not slow.done:
            slow.put_text("x")
            time.sleep(0.2)

    threading.Thread(target=engine, daemon=True).start()
    start = time.perf_counter()
    with pytest.raises(AnswerTimeout, match="longer than 1.2 s"):
        slow.text()
    assert 1.1 < time.perf_counter() - start < 5  # the 1.2 s cap, with room for a busy machine


def test_touches_keep_a_waiting_ticket_alive():
    waiting = ticket(0.3)
    for _ in range(5):  # the engine's steps while it waits its turn
        time.sleep(0.1)
        waiting.touch()
    waiting.put_text("hi")
    waiting.finish("stop")
    assert list(waiting) == ["hi"] and waiting.finish_reason == "stop"


def test_bad_bounds_are_refused_in_words(monkeypatch):
    monkeypatch.setenv("TUNEDESK_ANSWER_IDLE_S", "soon")
    with pytest.raises(
        ValueError, match="TUNEDESK_ANSWER_IDLE_S must be a number of seconds above 0"
    ):
        answer_bound()
    with pytest.raises(
        ValueError, match="the answer timeout must be a number of seconds above 0, got 0"
    ):
        answer_bound(5, 0)
    monkeypatch.delenv("TUNEDESK_ANSWER_IDLE_S")
    assert answer_bound() == AnswerBound(30.0, 600.0)


def test_compare_gets_a_sentence_for_a_lost_pane():
    with pytest.raises(ValueError, match="no progress on this answer") as failed:
        answers_together([lambda: ticket(0.2)], ["hash"])
    assert isinstance(failed.value.__cause__, AnswerTimeout)
    assert failure_sentence(RuntimeError("boom")) == "the answer failed: RuntimeError: boom"
