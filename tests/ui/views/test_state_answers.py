"""Chat's answer from the serving engine: an engine's failure or timeout reaches the page as a
sentence (ValueError), never a traceback."""

from __future__ import annotations

import pytest

from inference.generate import GenerationSettings
from serve.interface.bounds import AnswerBound
from serve.interface.ticket import Ticket
from ui.views.state import AppState

MSGS = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "failure", [None, RuntimeError("continuous batching needs full-attention layers")]
)
def test_chat_gets_a_sentence_when_the_engine_fails_or_times_out(
    home, varied_dir, monkeypatch, failure
):
    monkeypatch.setenv("TUNEDESK_DTYPE", "float32")  # no dtype measurement
    state = AppState(str(varied_dir), "pytorch")
    ticket = Ticket("base", 3, lambda _: 0, AnswerBound(0.2, 60))

    def submit(messages, adapter, settings):
        if failure is not None:
            ticket.fail(failure)
        return ticket  # else nobody ever writes to it: it times out

    monkeypatch.setattr(state.serving, "submit", submit)
    want = (
        "the answer failed: RuntimeError: continuous"
        if failure
        else "no progress on this answer for 0.2 s"
    )
    with pytest.raises(ValueError, match=want):
        list(state.stream_answer(MSGS, None, GenerationSettings()))
    assert ticket.done
