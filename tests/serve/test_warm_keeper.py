"""serve/warm_keeper.py: kept warm-ups live in the store (one per model, the newest request
wins), are replayed in model order, and one that fails is said and stays kept."""

from __future__ import annotations

import threading

from core.store.home import open_store
from serve.api_basics import ApiError
from serve.warm_keeper import WarmKeeper


def test_kept_warmups_are_replayed_and_a_failing_one_stays(home):
    ran, gone = [], {"old-alias"}

    def run(body):
        ran.append(body)
        if body["model"] in gone:
            raise ApiError(404, f"no model named {body['model']!r} here", "invalid_request_error")
        return {"data": [{"line": f"warmed {body['model']} with 3 of 3 passages"}]}

    keeper = WarmKeeper(open_store(), run)
    keeper.keep({"model": "support", "max_passages": 5, "keep": True})
    keeper.keep({"model": "support", "max_passages": 9})  # the newest request replaces it
    keeper.keep({"model": "old-alias"})
    assert [(r["model"], r["body"]) for r in keeper.rows()] == [
        ("old-alias", {"model": "old-alias"}),
        ("support", {"model": "support", "max_passages": 9}),
    ]
    done = keeper.replay()
    assert done == [
        {"model": "old-alias", "error": "no model named 'old-alias' here"},
        {"model": "support", "lines": ["warmed support with 3 of 3 passages"]},
    ]
    assert [r["model"] for r in WarmKeeper(open_store(), run).rows()] == ["old-alias", "support"]
    assert keeper.forget("old-alias") and not keeper.forget("old-alias")
    assert [r["model"] for r in keeper.rows()] == ["support"]


def test_a_start_during_a_replay_replays_again_after_it(home):
    entered, release, calls = threading.Event(), threading.Event(), []

    def run(body):
        calls.append(body["model"])
        entered.set()
        release.wait(10)
        return {"data": []}

    keeper = WarmKeeper(open_store(), run)
    keeper.keep({"model": "support"})
    keeper.replay_soon()
    assert entered.wait(10)
    keeper.replay_soon()  # a new server while the first replay runs
    keeper.replay_soon()  # and another: still one more replay, not two
    release.set()
    for _ in range(1000):
        if not keeper._running:
            break
        threading.Event().wait(0.01)
    assert calls == ["support", "support"] and not keeper._running
