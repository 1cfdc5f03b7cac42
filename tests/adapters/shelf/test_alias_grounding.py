"""An alias's grounding (off, auto, a knowledge NAME[@vN]): kept with the alias, audited,
rolled back with the change that set it, refused in a sentence when misspelt."""

from __future__ import annotations

import json

import pytest
from alias_helpers import PASSED, put_versions

from adapters.alias_actions import details
from adapters.shelf.alias_rules import AliasError, check_grounding, split_grounding
from adapters.shelf.aliases import AliasBook, grounding_of


@pytest.fixture
def book(home, random_lora_dir):
    return AliasBook(put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED}))


def stored(home) -> dict:
    return json.loads((home / "releases" / "aliases.json").read_text())["aliases"]


def test_grounding_is_kept_audited_and_rolled_back_with_its_change(book, home):
    book.set("bot", {"v3": 100}, by="ana")
    assert "grounding" not in stored(home)["bot"] and grounding_of(book.row("bot")) == "auto"
    row = book.set("bot", None, by="ben", grounding="faq@v2")  # the split kept
    assert row["changed"] and row["grounding"] == {"from": "auto", "to": "faq@v2"}
    assert stored(home)["bot"]["grounding"] == "faq@v2" and book.get("bot") == {"v3": 100}
    assert not book.set("bot", None, by="ben", grounding="faq@v2")["changed"]
    book.promote("bot", "v4", by="cy")  # a promotion keeps the grounding
    assert grounding_of(book.row("bot")) == "faq@v2"
    book.set("bot", None, by="dee", grounding="OFF")
    assert grounding_of(book.row("bot")) == "off"
    assert [r.get("grounding") for r in book.history("bot")] == [
        None,
        {"from": "auto", "to": "faq@v2"},
        None,
        {"from": "faq@v2", "to": "off"},
    ]
    book.rollback("bot", by="ed")
    assert grounding_of(book.row("bot")) == "faq@v2" and book.get("bot") == {"v3": 0, "v4": 100}
    book.delete("bot", by="ed")
    book.rollback("bot", by="ed")  # the deleted alias comes back with its grounding
    assert grounding_of(book.row("bot")) == "faq@v2"
    assert "grounding: knowledge faq@v2" in "\n".join(details("bot", book))


@pytest.mark.parametrize("bad", ["", "faq@2", "faq@latest", "../x", "faq@v", 7, None])
def test_a_misspelt_grounding_is_refused_and_nothing_changes(book, home, bad):
    book.set("bot", {"v3": 100}, by="ana", grounding="faq")
    with pytest.raises(AliasError) as err:
        book.set("bot", None, by="ben", grounding=bad)
    assert err.value.param == "grounding" and "grounding must be 'off', 'auto'" in str(err.value)
    assert stored(home)["bot"]["grounding"] == "faq" and len(book.history("bot")) == 1


def test_the_spellings():
    assert [check_grounding(v) for v in ("auto", " Off ", "faq", "faq@v12")] == [
        "auto",
        "off",
        "faq",
        "faq@v12",
    ]
    assert [split_grounding(v) for v in ("auto", "off", "faq", "faq@v3")] == [
        None,
        None,
        ("faq", "latest"),
        ("faq", "v3"),
    ]


def test_the_command_line_sets_and_shows_it(book, capsys):
    from adapters.__main__ import main

    assert main(["alias", "set", "bot", "v3=100", "--grounding", "off"]) == 0
    assert "Grounding: off (answers from the weights alone)." in capsys.readouterr().out
    assert main(["alias", "show", "bot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["grounding"] == "off"
    assert main(["alias", "list"]) == 0
    assert "(grounding: off)" in capsys.readouterr().out


def test_a_gate_passed_on_grounded_answers_serves_only_as_it_was_checked(home, random_lora_dir):
    from alias_helpers import set_gate

    shelf = put_versions(random_lora_dir, {"v5": None, "v6": PASSED})
    shelf.write_manifest_fields("v5", {"knowledge": {"name": "faq", "version": "v2"}})
    set_gate("v5", {**PASSED, "grounding": "faq v2"}, shelf)
    assert shelf.get("v5").manifest["gate"]["grounding"] == "faq v2"
    book = AliasBook(shelf)
    book.set("bot", {"v5": 100}, by="ana")  # auto: grounded in its own faq v2, as checked
    book.set("pinned", {"v5": 100}, by="ana", grounding="faq@v2")
    book.set("newest", {"v5": 100}, by="ana", grounding="faq")  # the newest faq: same base
    with pytest.raises(AliasError) as err:
        book.set("plain", {"v5": 100}, by="ana", grounding="off")
    assert (
        "its release gate passed on answers grounded in faq v2, and this alias would serve it "
        "ungrounded" in str(err.value)
    )
    with pytest.raises(AliasError, match="would serve it grounded in other v1") as err:
        book.set("other", {"v5": 100}, by="ana", grounding="other@v1")
    assert (
        "set grounding auto, faq@v2 (pinned) or faq (its newest version), or evaluate it as "
        "served (python -m eval --knowledge other@v1)" in str(err.value)
    )
    # turning grounding off under an alias already serving it is judged again
    with pytest.raises(AliasError, match="served as the gate checked it"):
        book.set("bot", None, by="ben", grounding="off")
    assert grounding_of(book.row("bot")) == "auto"
    row = book.set("bot", None, by="ben", grounding="off", force=True, reason="A/B plain answers")
    assert row["forced"] == ["v5"] and grounding_of(book.row("bot")) == "off"
    # a gate checked on plain answers says nothing about grounding: any grounding is allowed
    book.set("plain-gated", {"v6": 100}, by="ana", grounding="other@v1")


def test_a_gate_passed_grounded_in_a_chosen_knowledge_base_serves_under_that_name(
    home, random_lora_dir
):
    """Evaluated grounded in the team's articles (python -m eval --knowledge articles): an alias
    grounded in articles serves it, on its newest version too; auto (its own past answers) is
    not what was judged, and the refusal does not advise it."""
    from alias_helpers import set_gate

    shelf = put_versions(random_lora_dir, {"v5": None})
    shelf.write_manifest_fields("v5", {"knowledge": {"name": "faq", "version": "v2"}})
    set_gate("v5", {**PASSED, "grounding": "articles v3"}, shelf)
    book = AliasBook(shelf)
    book.set("bot", {"v5": 100}, by="ana", grounding="articles")
    book.set("pinned", {"v5": 100}, by="ana", grounding="articles@v3")
    with pytest.raises(AliasError) as err:
        book.set("own", {"v5": 100}, by="ana")  # auto: its own faq v2
    said = str(err.value)
    assert (
        "passed on answers grounded in articles v3, and this alias would serve it grounded "
        "in faq v2; set grounding articles@v3 (pinned) or articles (its newest version), or "
        "evaluate it as served (python -m eval --knowledge faq@v2)" in said
    )
    with pytest.raises(AliasError, match=r"evaluate it as served \(python -m eval --grounding off"):
        book.set("plain", {"v5": 100}, by="ana", grounding="off")


def test_the_command_line_refuses_a_knowledge_version_not_on_the_shelf(
    book, home, tmp_path, capsys
):
    """As the API and the Adapters tab do: a typo in --grounding was kept, and every answer of
    the alias was then a 400."""
    from adapters.__main__ import main
    from knowledge.actions import import_files

    assert main(["alias", "set", "bot", "v3=100", "--grounding", "faq@v2"]) == 2
    err = capsys.readouterr().err
    assert "--grounding faq@v2: no knowledge base named 'faq'" in err and err.count("\n") == 1
    assert "python -m knowledge import FILE --name faq" in err
    assert not (home / "releases" / "aliases.json").exists() or "bot" not in stored(home)
    (tmp_path / "faq.csv").write_text("question,answer\nHi?,Hello.\n")
    import_files([tmp_path / "faq.csv"], "faq")
    assert main(["alias", "set", "bot", "v3=100", "--grounding", "faq@v2"]) == 2
    assert "--grounding faq@v2: faq has no version 'v2' (versions: v1)" in capsys.readouterr().err
    assert main(["alias", "set", "bot", "v3=100", "--grounding", "faq@v1"]) == 0
    assert main(["alias", "set", "bot", "--grounding", "faq"]) == 0
    assert grounding_of(book.row("bot")) == "faq"
