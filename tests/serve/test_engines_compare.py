"""Compare through the engines on PyTorch: the panes, decoded together as rows of the shared
scheduler's batch, are what the session's direct compare gives, labelled alike."""

from __future__ import annotations

import pytest

from inference.generate import GenerationSettings
from inference.generate import compare as direct_compare
from serve.batching.scheduler import shared_scheduler
from serve.engines import Engines

MSGS = [{"role": "user", "content": "Where is my order?"}]
GREEDY = GenerationSettings(max_new_tokens=16)


def test_compare_panes_equal_the_direct_compare(session):
    try:
        direct = direct_compare(session, MSGS, [None, "a", "b"], GREEDY)
        batched, line = Engines(session, "pytorch").compare(MSGS, [None, "a", "b"], GREEDY)
        assert [
            (p.adapter, p.adapter_hash, p.text, p.tokens, p.finish_reason) for p in batched
        ] == [(p.adapter, p.adapter_hash, p.text, p.tokens, p.finish_reason) for p in direct]
        assert len({p.seconds for p in batched}) == 1
        assert line.startswith("3 answers decoded together on pytorch float32, batched")
        one, line = Engines(session, "pytorch").compare(MSGS, ["a"], GREEDY)
        assert len(one) == 1 and line.startswith("1 answer decoded on pytorch float32, batched")
        with pytest.raises(ValueError, match="at least one"):
            Engines(session, "pytorch").compare(MSGS, [], GREEDY)
    finally:
        shared_scheduler(session).close()
