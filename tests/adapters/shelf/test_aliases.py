"""Aliases on the shelf: the split checked against the shelf and the gate, written atomically
under a lock, every change audited, rollback one step at a time."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest
from alias_helpers import ABOUT, FAILED, PASSED, put_versions

from adapters.shelf.alias_rules import AliasError, parse_split
from adapters.shelf.aliases import (
    AliasBook,
    AliasNotFoundError,
    aliases_path,
    read_splits,
    since_epoch,
)
from adapters.shelf.gate_rules import record
from adapters.shelf.store import Shelf
from core.store.home import open_store
from core.store.tables import audit_rows


@pytest.fixture
def book(home, random_lora_dir):
    """v3 and v4 passed their gate, v5 failed it, v6 was never evaluated."""
    return AliasBook(
        put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED, "v5": FAILED, "v6": None})
    )


def test_a_split_is_written_atomically_and_every_change_is_audited(book, home):
    row = book.set("support-bot", {"v3": 100}, by="ana")
    assert row["changed"] and row["from"] is None and row["to"] == {"v3": 100}
    book.set("support-bot", {"v3": 90, "v4": 10}, by="ben")
    assert (
        book.get("support-bot")
        == {"v3": 90, "v4": 10}
        == read_splits(aliases_path(home))["support-bot"]
    )
    assert not book.set("support-bot", {"v3": 90, "v4": 10}, by="ben")[
        "changed"
    ]  # same split: nothing written
    stored = json.loads((home / "releases" / "aliases.json").read_text())
    assert (
        stored["format"] == "tunedesk-aliases/1" and stored["aliases"]["support-bot"]["by"] == "ben"
    )
    rows = audit_rows(open_store(home))
    assert [(r["by"], r["action"], r["from"], r["to"], r["override"]) for r in rows] == [
        ("ana", "set", None, {"v3": 100}, None),
        ("ben", "set", {"v3": 100}, {"v3": 90, "v4": 10}, None),
    ]
    assert all(r["time"].endswith("Z") and len(r["id"]) == 12 for r in rows)
    assert not list((home / "releases").glob(".aliases.json-*"))  # no temp file left behind
    assert [e.name for e in Shelf().list() if e.name == "support-bot"] == []  # not an adapter


@pytest.mark.parametrize(
    "name, split, param, words",
    [
        ("support-bot", {"v3": 60, "v4": 30}, "versions", "sum to 100, they sum to 90"),
        (
            "support-bot",
            {"v3": 100, "nope": 0},
            "versions.nope",
            "'nope' is not an adapter on the shelf",
        ),
        (
            "support-bot",
            {"v3": 50.0, "v4": 50},
            "versions.v3",
            "must be a whole number from 0 to 100",
        ),
        ("support-bot", {"v3": 101, "v4": -1}, "versions.v3", "got 101"),
        ("support-bot", {}, "versions", "at least one adapter"),
        ("support-bot", ["v3"], "versions", "at least one adapter"),
        ("v3", {"v4": 100}, "name", "'v3' is an adapter on the shelf"),
        ("base", {"v4": 100}, "name", "names the base model"),
        ("../up", {"v4": 100}, "name", "invalid alias name"),
    ],
)
def test_bad_changes_are_refused_naming_the_field_and_nothing_is_written(
    book, home, name, split, param, words
):
    with pytest.raises(AliasError) as err:
        book.set(name, split, by="ana")
    assert words in str(err.value) and err.value.param == param
    assert not (home / "releases" / "aliases.json").exists() and book.history() == []


def test_every_problem_is_named_at_once(book):
    with pytest.raises(AliasError) as err:
        book.set("support-bot", {"v3": 70, "ghost": 20, "v4": "5"}, by="ana")
    said = str(err.value)
    assert (
        "'ghost' is not an adapter" in said and "the weight of 'v4' must be a whole number" in said
    )


def test_an_alias_an_adapter_took_the_name_of_since_can_still_be_deleted(book, random_lora_dir):
    from adapters.export import import_adapter

    book.set("support-bot", {"v3": 100}, by="ana")
    import_adapter(random_lora_dir, name="support-bot")  # trained or imported under that name later
    with pytest.raises(AliasError, match="is an adapter on the shelf"):
        book.set("support-bot", {"v4": 100}, by="ana")
    assert book.delete("support-bot", by="ana")["to"] is None and book.all() == {}


def test_the_alias_may_not_be_named_after_its_versions_base_model(book):
    book.shelf.write_manifest_fields(
        "v6", {"base_model": {"name": "gpt2"}}
    )  # a Hub id without an org
    with pytest.raises(AliasError) as err:
        book.set("gpt2", {"v6": 100}, by="ana")
    assert err.value.param == "name" and "names the base model of 'v6'" in str(err.value)


def test_a_version_without_a_passed_gate_gains_traffic_only_with_a_reasoned_override(book, home):
    book.set("support-bot", {"v3": 100}, by="ana")
    for version, state in [("v5", "failed"), ("v6", "not evaluated")]:
        with pytest.raises(AliasError) as err:
            book.set("support-bot", {"v3": 90, version: 10}, by="ana")
        assert (
            err.value.param == f"versions.{version}"
            and f"release gate of {version}: {state}" in str(err.value)
        )
        assert "--force --reason" in str(err.value)
    with pytest.raises(AliasError) as err:
        book.set("support-bot", {"v3": 90, "v5": 10}, by="ana", force=True)
    assert err.value.param == "reason" and "needs a reason" in str(err.value)
    row = book.set(
        "support-bot",
        {"v3": 90, "v5": 10},
        by="ana",
        force=True,
        reason="hotfix for the refund bug",
    )
    assert row["forced"] == ["v5"] and row["override"] == "hotfix for the refund bug"
    # Taking traffic away from a failed version never needs the override.
    assert book.set("support-bot", {"v3": 95, "v5": 5}, by="ana")["forced"] == []
    with pytest.raises(AliasError):
        book.promote("support-bot", "v5", by="ana")
    assert book.get("support-bot") == {"v3": 95, "v5": 5}
    last = audit_rows(open_store(home))[-1]
    assert last["to"] == {"v3": 95, "v5": 5} and last["override"] is None


def test_promote_keeps_the_others_at_zero_so_their_conversations_finish(book):
    with pytest.raises(AliasNotFoundError, match="alias set support-bot v4=100"):
        book.promote("support-bot", "v4", by="ana")
    book.set("support-bot", {"v3": 90, "v4": 10}, by="ana")
    book.promote("support-bot", "v4", by="ana")
    assert book.get("support-bot") == {"v3": 0, "v4": 100}


def test_rollback_steps_back_one_change_at_a_time_and_restores_a_deleted_alias(book):
    for split in ({"v3": 100}, {"v3": 90, "v4": 10}, {"v3": 0, "v4": 100}):
        book.set("support-bot", split, by="ana")
    assert book.rollback("support-bot", by="ana")["to"] == {"v3": 90, "v4": 10}
    assert book.rollback("support-bot", by="ana")["to"] == {"v3": 100}
    with pytest.raises(AliasError, match="its first change created it"):
        book.rollback("support-bot", by="ana")
    book.set("support-bot", {"v4": 100}, by="ana")
    assert book.rollback("support-bot", by="ana")["to"] == {
        "v3": 100
    }  # a new change is undone first
    book.delete("support-bot", by="ana")
    with pytest.raises(AliasNotFoundError):
        book.get("support-bot")
    with pytest.raises(AliasNotFoundError):
        book.delete("support-bot", by="ana")
    assert book.rollback("support-bot", by="ana")["to"] == {"v3": 100}
    assert [r["action"] for r in book.history("support-bot")] == [
        "set",
        "set",
        "set",
        "rollback",
        "rollback",
        "set",
        "rollback",
        "delete",
        "rollback",
    ]


def test_a_rollback_onto_a_version_that_failed_since_needs_the_override(book):
    book.set("support-bot", {"v3": 100}, by="ana")
    book.set("support-bot", {"v4": 100}, by="ana")
    record(book.shelf, "v3", FAILED, ABOUT)  # evaluated again since: failed
    with pytest.raises(AliasError, match="release gate of v3: failed"):
        book.rollback("support-bot", by="ana")
    assert book.rollback("support-bot", by="ana", force=True, reason="v4 answers in French")[
        "forced"
    ] == ["v3"]


def test_concurrent_writers_lose_no_change(book):
    def write(i):
        AliasBook(book.shelf).set(f"bot-{i}", {"v3": 100 - i, "v4": i}, by=f"writer {i}")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert book.all() == {f"bot-{i}": {"v3": 100 - i, "v4": i} for i in range(8)}
    assert len(book.history()) == 8


def test_a_damaged_file_is_one_sentence_saying_how_to_recover(book, home):
    book.set("support-bot", {"v3": 100}, by="ana")
    (home / "releases" / "aliases.json").write_text("{oops")
    with pytest.raises(AliasError, match="its audit"):
        book.get("support-bot")


def test_typed_splits_are_parsed_or_refused_in_words():
    assert parse_split(["v3=90", " v4 = 10 "]) == {"v3": 90, "v4": 10}
    with pytest.raises(AliasError) as err:
        parse_split(["v3", "v4=ten", "v5=1", "v5=2"])
    said = str(err.value)
    assert "expected VERSION=WEIGHT" in said and "'ten'" in said and "'v5' is named twice" in said


def test_the_automatic_rollback_is_kept_with_the_alias_and_since_moves_only_with_the_split(
    book, home, monkeypatch
):
    import adapters.shelf.aliases as shelf_aliases

    clock = itertools.count(1_800_000_000, 10)
    gmtime = time.gmtime
    monkeypatch.setattr(shelf_aliases.time, "gmtime", lambda *_: gmtime(next(clock)))
    policy = {"margin": 0.1, "min_requests": 50}
    row = book.set("support-bot", {"v3": 90, "v4": 10}, by="ana", auto_rollback=policy)
    assert row["auto_rollback"] == {
        "from": None,
        "to": {"margin": 0.1, "min_requests": 50, "min_ratings": 10},
    }
    first = book.row("support-bot")
    assert since_epoch(first) == 1_800_000_000 and first["auto_rollback"]["min_ratings"] == 10
    assert not book.set("support-bot", None, by="ana", auto_rollback=policy)["changed"]
    book.set(
        "support-bot", None, by="ben", auto_rollback={**policy, "margin": 0.2}
    )  # the setting alone
    assert since_epoch(book.row("support-bot")) == 1_800_000_000  # the split did not change
    book.set("support-bot", {"v3": 80, "v4": 20}, by="ben")
    moved = book.row("support-bot")
    assert since_epoch(moved) > 1_800_000_000 and moved["auto_rollback"]["margin"] == 0.2  # kept
    with pytest.raises(AliasError) as err:
        book.set(
            "support-bot",
            None,
            by="ana",
            auto_rollback={"margin": 0, "min_requests": 2.5, "sure": 1},
        )
    assert err.value.param == "auto_rollback.sure" and "margin must be a number above 0" in str(
        err.value
    )
    assert "min requests must be a whole number" in str(err.value)
    with pytest.raises(AliasNotFoundError):
        book.set("new-bot", None, by="ana", auto_rollback=policy)


def test_fall_back_takes_the_failing_canary_out_without_the_gate_and_a_rollback_brings_it_back(
    book,
):
    book.set("support-bot", {"v3": 100}, by="ana")
    book.set(
        "support-bot",
        {"v3": 80, "v4": 10, "v5": 10},
        by="ana",
        force=True,
        reason="canary of the fix",
    )
    record(
        book.shelf, "v3", FAILED, ABOUT
    )  # the stable version failed since: a fall-back still goes to it
    with pytest.raises(AliasError, match="changed while its figures were judged"):
        book.fall_back("support-bot", {"v3": 90, "v5": 10}, "v3", ["v5"], "v5: error rate 0.50")
    row = book.fall_back(
        "support-bot", {"v3": 80, "v4": 10, "v5": 10}, "v3", ["v5"], "v5: error rate 0.50"
    )
    assert (row["by"], row["action"], row["reason"], row["to"]) == (
        "auto-rollback",
        "auto-rollback",
        "v5: error rate 0.50",
        {"v3": 90, "v4": 10},
    )
    assert book.get("support-bot") == {"v3": 90, "v4": 10}
    with pytest.raises(
        AliasError, match="release gate of v5: failed"
    ):  # undoing it is gated as any change
        book.rollback("support-bot", by="ana")
    assert book.rollback("support-bot", by="ana", force=True, reason="fixed")["to"] == {
        "v3": 80,
        "v4": 10,
        "v5": 10,
    }


def test_the_answer_check_is_a_setting_kept_through_changes_and_rolled_back(book, home):
    book.set("support-bot", {"v3": 100}, by="ana")
    assert "check" not in book.row("support-bot")  # off, the default, is not stored
    row = book.set("support-bot", None, by="ana", check="on")  # the setting alone
    assert row["changed"] and row["check"] == {"from": "off", "to": "on"}
    assert book.row("support-bot")["check"] == "on" and book.get("support-bot") == {"v3": 100}
    assert not book.set("support-bot", None, by="ana", check="on")["changed"]
    book.promote("support-bot", "v4", by="ben")  # other changes keep it
    assert book.row("support-bot")["check"] == "on"
    book.rollback("support-bot", by="ben")  # undoes the promotion: still on
    assert book.row("support-bot")["check"] == "on"
    book.rollback("support-bot", by="ben")  # undoes turning it on
    assert "check" not in book.row("support-bot")
    with pytest.raises(AliasError) as err:
        book.set("support-bot", None, by="ana", check="maybe")
    assert err.value.param == "check" and "'on' or 'off'" in str(err.value)
