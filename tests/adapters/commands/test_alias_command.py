"""`python -m adapters alias ...`: what it prints, what it refuses, and what it writes."""

from __future__ import annotations

import json

import pytest
from alias_helpers import FAILED, PASSED, put_versions

from adapters.__main__ import main
from core.store.home import open_store
from core.store.tables import audit_rows


@pytest.fixture
def versions(home, random_lora_dir):
    """v3 and v4 passed their release gate; v5 failed it."""
    return put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED, "v5": FAILED})


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["alias", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_set_show_promote_rollback_and_delete(versions, home, capsys):
    assert run(capsys, "list")[1].startswith("No aliases yet")
    code, out, _ = run(capsys, "set", "support-bot", "v3=90", "v4=10", "--by", "ana")
    assert code == 0 and out.strip() == "support-bot: (none) → v3 90% · v4 10%."
    code, out, _ = run(capsys, "show", "support-bot")
    assert "v3                                90%  release gate: passed" in out and "by ana" in out
    assert run(capsys, "promote", "support-bot", "v4")[1].strip() == (
        "support-bot: v3 90% · v4 10% → v3 0% · v4 100%."
    )
    assert (
        run(capsys, "rollback", "support-bot")[1].strip()
        == "support-bot: v3 0% · v4 100% → v3 90% · v4 10%."
    )
    code, out, _ = run(capsys, "list", "--json")
    assert json.loads(out) == {"support-bot": {"v3": 90, "v4": 10}}
    assert "rollback support-bot` restores it" in run(capsys, "delete", "support-bot")[1]
    history = audit_rows(open_store(home))
    assert [r["action"] for r in history] == ["set", "promote", "rollback", "delete"]
    assert history[0]["by"] == "ana" and history[1]["by"].endswith("(cli)")


def test_a_failed_gate_blocks_promotion_until_a_reasoned_override(versions, home, capsys):
    run(capsys, "set", "support-bot", "v3=100")
    code, out, err = run(capsys, "promote", "support-bot", "v5")
    assert (
        code == 2 and not out and "release gate of v5: failed" in err and "--force --reason" in err
    )
    code, _, err = run(capsys, "promote", "support-bot", "v5", "--force")
    assert code == 2 and "needs a reason" in err
    code, out, _ = run(
        capsys,
        "promote",
        "support-bot",
        "v5",
        "--force",
        "--reason",
        "the refund fix, gate rerun later",
    )
    assert (
        code == 0
        and "Override for v5 (release gate not passed): 'the refund fix, gate rerun later'" in out
    )
    last = audit_rows(open_store(home))[-1]
    assert last["override"] == "the refund fix, gate rerun later" and last["forced"] == ["v5"]


def test_a_failed_gate_keeps_a_canary_out_of_a_split_and_the_refusal_changes_nothing(
    versions, home, capsys
):
    run(capsys, "set", "support-bot", "v3=100")
    before = (home / "releases" / "aliases.json").read_text()
    code, out, err = run(capsys, "set", "support-bot", "v3=90", "v5=10")
    assert code == 2 and not out and "release gate of v5: failed" in err
    code, _, err = run(capsys, "set", "support-bot", "v3=90", "v5=10", "--force", "--reason", " ")
    assert code == 2 and "needs a reason" in err
    assert (home / "releases" / "aliases.json").read_text() == before
    assert len(audit_rows(open_store(home))) == 1
    code, out, _ = run(
        capsys, "set", "support-bot", "v3=90", "v5=10", "--force", "--reason", "canary of the fix"
    )
    assert code == 0 and "Override for v5" in out


def test_the_automatic_rollback_is_set_kept_shown_and_turned_off(versions, home, capsys):
    code, out, _ = run(
        capsys,
        "set",
        "support-bot",
        "v3=90",
        "v4=10",
        "--auto-rollback-margin",
        "0.1",
        "--min-requests",
        "40",
    )
    assert code == 0 and out.strip() == (
        "support-bot: (none) → v3 90% · v4 10%. Automatic rollback: when a canary's error rate "
        "(after 40 requests) or thumbs-down rate (after 10 ratings) exceeds the stable version's "
        "by more than 0.1."
    )
    assert (
        run(capsys, "set", "support-bot", "v3=80", "v4=20")[0] == 0
    )  # no flag: the rollback is kept
    code, out, _ = run(
        capsys, "set", "support-bot", "--min-ratings", "5"
    )  # no split: only the setting
    assert (
        code == 0
        and out.startswith("support-bot: v3 80% · v4 20% (split unchanged).")
        and "after 5" in out
    )
    stored = json.loads((home / "releases" / "aliases.json").read_text())["aliases"]["support-bot"]
    assert stored["auto_rollback"] == {"margin": 0.1, "min_requests": 40, "min_ratings": 5}
    assert "(automatic rollback at +0.1)" in run(capsys, "list")[1]
    assert (
        "automatic rollback: when a canary's error rate (after 40 requests)"
        in run(capsys, "show", "support-bot")[1]
    )
    assert (
        run(capsys, "rollback", "support-bot")[1]
        .strip()
        .endswith("(after 10 ratings) exceeds the stable version's by more than 0.1.")
    )
    code, out, _ = run(capsys, "set", "support-bot", "--no-auto-rollback", "--by", "ana")
    assert code == 0 and out.strip().endswith("Automatic rollback: off.")
    history = audit_rows(open_store(home))
    assert history[-1]["auto_rollback"] == {
        "from": {"margin": 0.1, "min_requests": 40, "min_ratings": 10},
        "to": None,
    }


@pytest.mark.parametrize(
    "argv, words",
    [
        (["set", "support-bot", "v3=90", "v4=5"], "the weights must sum to 100, they sum to 95"),
        (["set", "support-bot", "v3=90", "ghost=10"], "'ghost' is not an adapter on the shelf"),
        (["set", "support-bot", "v3"], "expected VERSION=WEIGHT"),
        (["set", "v3", "v4=100"], "'v3' is an adapter on the shelf"),
        (["set", "bad/name", "v4=100"], "invalid alias name"),
        (["show", "nobody"], "no alias named 'nobody'"),
        # it said only "no alias named 'nobody'", where show and delete say where they are
        (["rollback", "nobody"], "no alias named 'nobody'; `python -m adapters alias list` shows"),
        (
            ["set", "support-bot", "v3=100", "--auto-rollback-margin", "1.5"],
            "must be a number above 0 and at most 1",
        ),
        (
            [
                "set",
                "support-bot",
                "v3=100",
                "--min-requests",
                "0",
                "--auto-rollback-margin",
                "0.1",
            ],
            "min requests must be a whole number of at least 1, got 0",
        ),
        (["set", "support-bot", "v3=100", "--min-requests", "20"], "need --auto-rollback-margin"),
        (
            ["set", "support-bot", "--no-auto-rollback", "--auto-rollback-margin", "0.1"],
            "turns it off",
        ),
        (
            ["set", "support-bot", "--auto-rollback-margin", "0.1"],
            "no alias named 'support-bot' yet",
        ),
    ],
)
def test_bad_input_is_one_sentence_and_exit_code_2(versions, home, capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out and words in err and err.count("\n") == 1
    assert audit_rows(open_store(home)) == []


def test_check_turns_the_answer_check_on_and_off(versions, home, capsys):
    run(capsys, "set", "support-bot", "v3=100")
    assert "answers checked before they are sent: off" in run(capsys, "show", "support-bot")[1]
    code, out, _ = run(capsys, "set", "support-bot", "--check", "on")  # the setting alone
    assert code == 0 and out.strip() == (
        "support-bot: v3 100% (split unchanged). Answers checked before they are sent: on."
    )
    stored = json.loads((home / "releases" / "aliases.json").read_text())["aliases"]["support-bot"]
    assert stored["check"] == "on" and stored["versions"] == {"v3": 100}
    assert run(capsys, "set", "support-bot", "v3=90", "v4=10")[0] == 0  # no flag: kept
    assert "answers checked before they are sent: on" in run(capsys, "show", "support-bot")[1]
    assert (
        run(capsys, "set", "support-bot", "--check", "off")[1]
        .strip()
        .endswith("Answers checked before they are sent: off.")
    )


def test_each_action_s_help_says_what_it_does_and_what_its_arguments_are(capsys):
    """`alias set --help` showed 'name' and 'VERSION=WEIGHT' with no word on either, and not
    what set does."""
    with pytest.raises(SystemExit):
        main(["alias", "set", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "give an alias its split (creates it)" in said
    assert "name the alias (a stable model name clients ask for, such as support-bot)" in said
    assert "VERSION=WEIGHT an adapter on the shelf and its share of new conversations" in said
    with pytest.raises(SystemExit):
        main(["alias", "promote", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "version the adapter on the shelf that takes all new conversations" in said
