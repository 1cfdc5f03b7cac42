"""Picking an alias's version: the split by weight, sticky conversations, the file watched by
stamp (read again only when it changed)."""

from __future__ import annotations

import json
import os
import random
from collections import Counter

import pytest

import serve.aliases as routing
from serve.aliases import AliasRouter, draw


def write(path, aliases: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": "tunedesk-aliases/1",
                "aliases": {n: {"versions": s} for n, s in aliases.items()},
            }
        )
    )
    os.replace(tmp, path)  # as the shelf writes it: a new file, a new stamp


@pytest.mark.parametrize(
    "split",
    [{"v3": 90, "v4": 10}, {"v3": 50, "v4": 50}, {"a": 70, "b": 20, "c": 10}, {"v3": 0, "v4": 100}],
)
def test_a_thousand_draws_land_within_three_points_of_the_weights(split):
    for seed in range(5):
        rng = random.Random(seed)
        counts = Counter(draw(split, rng) for _ in range(1000))
        assert all(abs(counts[v] / 10 - w) <= 3 for v, w in split.items()), (seed, counts)
        assert all(counts[v] == 0 for v, w in split.items() if w == 0)


def test_a_conversation_keeps_its_version_while_it_is_listed_even_at_zero(tmp_path):
    path = tmp_path / "releases" / "aliases.json"
    write(path, {"bot": {"v3": 50, "v4": 50}})
    router = AliasRouter(path, rng=random.Random(1))
    first = {key: router.pick("bot", key).version for key in map(str, range(40))}
    assert set(first.values()) == {"v3", "v4"}
    write(path, {"bot": {"v3": 0, "v4": 100}})  # v3 takes no new conversations; its own finish
    assert {key: router.pick("bot", key).version for key in first} == first
    assert {router.pick("bot", f"new-{i}").version for i in range(20)} == {"v4"}
    write(path, {"bot": {"v4": 100}})  # v3 taken out: its conversations move
    assert {router.pick("bot", key).version for key in first} == {"v4"}
    assert router.pick("a-model", "x") is None and router.pick("bot").alias == "bot"


def test_the_sticky_map_forgets_the_least_recently_used(tmp_path):
    path = tmp_path / "aliases.json"
    write(path, {"bot": {"v3": 50, "v4": 50}})
    router = AliasRouter(path, sticky_max=10, rng=random.Random(0))
    for i in range(25):
        router.pick("bot", f"c{i}")
    assert router.remembered() == 10
    assert router.pick("bot", "c24").version in ("v3", "v4") and router.remembered() == 10


def test_the_file_is_read_again_only_when_its_stamp_changes(tmp_path, monkeypatch):
    path = tmp_path / "aliases.json"
    reads = []
    real = routing.read_aliases
    monkeypatch.setattr(routing, "read_aliases", lambda p: reads.append(p) or real(p))
    router = AliasRouter(path)
    assert router.pick("bot") is None and reads == []  # no file: nothing to read
    write(path, {"bot": {"v3": 100}})
    for _ in range(100):
        assert router.pick("bot", "c1").version == "v3"
    assert len(reads) == 1
    write(path, {"bot": {"v4": 100}})
    assert router.pick("bot", "c1").version == "v4" and len(reads) == 2
    path.unlink()
    assert router.pick("bot") is None


def test_a_damaged_file_keeps_the_last_good_splits(tmp_path, caplog):
    path = tmp_path / "aliases.json"
    write(path, {"bot": {"v3": 100}})
    router = AliasRouter(path)
    assert router.pick("bot").version == "v3"
    path.write_text("{half a file")
    assert router.pick("bot").version == "v3"
    assert "aliases unchanged" in caplog.text


def test_the_automatic_rollback_is_read_with_the_split_and_a_bad_one_is_not_used(tmp_path, caplog):
    path = tmp_path / "aliases.json"
    path.write_text(
        json.dumps(
            {
                "format": "tunedesk-aliases/1",
                "aliases": {
                    "bot": {
                        "versions": {"v3": 90, "v4": 10},
                        "since": "2026-12-01T10:00:00Z",
                        "auto_rollback": {"margin": 0.1, "min_requests": 5},
                    },
                    "odd": {
                        "versions": {"v3": 100},
                        "updated": "2026-12-01T10:00:00Z",
                        "auto_rollback": {"margin": 7},
                    },
                    "plain": {"versions": {"v3": 100}},
                },
            }
        )
    )
    policies = AliasRouter(path).policies()
    assert policies == {
        "bot": ({"margin": 0.1, "min_requests": 5, "min_ratings": 10}, 1796119200.0)
    }
    assert "automatic rollback of odd off" in caplog.text
