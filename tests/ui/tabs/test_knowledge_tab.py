"""The Knowledge tab: import, browse versions and passages, search, delete, through the app's
own handlers; bad input is a warning sentence and nothing changes."""

from __future__ import annotations

import pytest
from ui_handlers import handlers

from knowledge.store import KnowledgeShelf
from ui.views import knowledge as view


@pytest.fixture
def files(tmp_path):
    md = tmp_path / "help.md"
    md.write_text(
        "# Refunds\nRefunds are paid within 30 days.\n# Shipping\nParcels take two to five days.\n"
    )
    faq = tmp_path / "faq.csv"
    faq.write_text("question,answer\nhow do I reset my password,Use the forgot password link.\n")
    return md, faq


def test_import_browse_search_delete_from_the_tab(home, tiny_llama_dir, files):
    table = handlers(tiny_llama_dir)
    said, names, versions, about, rows = table["knowledge_import"](
        [str(files[0])], "kb", "auto", False
    )
    assert said.startswith("Imported 2 passage(s) from 1 file(s) into kb v1")
    assert (names["choices"], names["value"], versions["value"]) == (["kb"], "kb", "v1")
    assert "2 articles" in about and [r[2] for r in rows] == ["Refunds", "Shipping"]
    said, _, versions, about, rows = table["knowledge_import"]([str(files[1])], "kb", "auto", False)
    assert "kb v2" in said and versions["choices"] == ["v2", "v1"] and "1 past answers" in about
    assert len(rows) == 3
    hits, note = table["knowledge_search"]("I forgot my password", "kb", "v2", 2)
    assert hits[0][4] == "how do I reset my password" and hits[0][0] == 1 and note == ""
    assert all(
        h[3] != "how do I reset my password"
        for h in table["knowledge_search"]("password", "kb", "v1", 3)[0]
    )
    assert table["knowledge_show"]("kb", "v1")[1] == rows[:2]
    said, names, versions, *_ = table["knowledge_delete"]("kb", "v1", True)
    assert said == "Deleted kb v1." and versions["choices"] == ["v2"]


def test_bad_input_changes_nothing(home, files, tmp_path):
    binary = tmp_path / "scan.txt"
    binary.write_bytes(b"\x00PDF")
    with pytest.raises(ValueError, match="scan.txt is not text"):
        view.import_upload([str(files[0]), str(binary)], "kb")
    with pytest.raises(ValueError, match="choose at least one file"):
        view.import_upload([], "kb")
    with pytest.raises(ValueError, match="invalid knowledge base name"):
        view.import_upload([str(files[0])], "../kb")
    assert KnowledgeShelf().names() == []
    view.import_upload([str(files[0])], "kb")
    with pytest.raises(ValueError, match="Deleting is for good"):
        view.delete_version("kb", "v1", False)
    with pytest.raises(ValueError, match="choose a knowledge base"):
        view.search_table("refund", None, None)
    assert view.versions("kb") == ["v1"]
    assert view.about(None, None).startswith("The knowledge shelf is empty")


def test_an_import_error_names_the_file_not_its_upload_path(home, files, tmp_path):
    """Gradio keeps an upload as <temp dir>/<64 hex>/<its name>; the sentence names the file."""
    upload = tmp_path / "gradio" / ("3f" * 32)
    upload.mkdir(parents=True)
    gone = upload / "help.md"  # the page still holds it; a restart or a cleaned /tmp took it
    with pytest.raises(ValueError) as err:
        view.import_upload([str(gone)], "kb")
    assert str(err.value) == (
        "help.md: the upload is no longer on the server (cleared, or the app restarted since "
        "it was uploaded); remove it and upload it again"
    )
    folder = upload / "notes.md"
    folder.mkdir()
    with pytest.raises(ValueError) as err:
        view.import_upload([str(files[0]), str(folder)], "kb")
    assert str(err.value) == "notes.md is a folder; name the files in it"
    assert KnowledgeShelf().names() == []


def test_a_search_that_matches_nothing_says_so_and_what_to_try(home, tiny_llama_dir, files):
    table = handlers(tiny_llama_dir)
    table["knowledge_import"]([str(files[0])], "kb", "auto", False)
    hits, note = table["knowledge_search"]("xylophone lessons", "kb", "v1", 3)
    assert hits == [] and note == (
        "Nothing in **kb v1** matched 'xylophone lessons': the search matches words (and their "
        "endings), not meanings. Try the words a customer would write, fewer words, or another "
        "version."
    )
    assert table["knowledge_search"]("refund", "kb", "v1", 3)[1] == ""
    # a refused search empties the table (its rows answered another query) and says why
    assert table["knowledge_search"]("  ", "kb", "v1", 3) == (
        [],
        "⚠️ the query is empty: type what a customer asks",
    )


def test_a_refused_import_or_delete_replaces_the_last_success_line(home, tiny_llama_dir, files):
    table = handlers(tiny_llama_dir)
    said, *_ = table["knowledge_import"]([str(files[0])], "kb", "auto", False)
    assert said.startswith("Imported 2 passage(s)")
    binary = files[0].parent / "scan.txt"
    binary.write_bytes(b"\x00PDF")
    said, *shown = table["knowledge_import"]([str(binary)], "kb", "auto", False)
    assert said == (
        "⚠️ Nothing imported: scan.txt is not text (a binary file); export it as Markdown, HTML, "
        "plain text, CSV or JSONL"
    )
    assert all(s == {"__type__": "update"} for s in shown)  # the shelf's view is left as it was
    said, *_ = table["knowledge_delete"]("kb", "v1", False)
    assert said.startswith("⚠️ Nothing deleted: ") and "Deleting is for good" in said
    assert KnowledgeShelf().versions("kb")  # nothing was


def test_a_refused_name_keeps_its_backslash_in_the_markdown_line(home, tiny_llama_dir, files):
    said, *_ = handlers(tiny_llama_dir)["knowledge_import"]([str(files[0])], "my kb", "auto", False)
    # the line is Markdown, which drops a lone backslash: it is sent doubled, shown single
    assert said.endswith("(no '/', '\\\\' or '..')"), said


def test_the_hits_shown_follow_the_knowledge_base_and_version_picked(home, tiny_llama_dir, files):
    """A search's hits stayed on screen after another knowledge base or version was picked, read
    as that one's. Each pick, refresh, import and delete searches the query again there (the
    Chromium test, tests/e2e/test_browser_bad_input.py, follows the page's events)."""
    table = handlers(tiny_llama_dir)
    table["knowledge_import"]([str(files[0])], "kb", "auto", False)
    table["knowledge_import"]([str(files[1])], "kb", "auto", False)
    again = table["knowledge_hits"]
    assert again("password", "kb", "v2", 3)[0][0][4] == "how do I reset my password"
    rows, line = again("password", "kb", "v1", 3)  # v1 holds no past answers
    assert rows == [] and line.startswith("Nothing in **kb v1** matched 'password'")
    assert again("", "kb", "v2", 3) == ([], "")  # an empty box: no hits, no refusal
    assert again("password", None, None, 3) == (
        [],
        "⚠️ choose a knowledge base first (or import a file)",
    )


def test_the_two_tables_say_which_is_which(tiny_llama_dir):
    """The search's hits and the version's passages were two tables with no label, one above
    the other, their columns alike."""
    blocks = handlers(tiny_llama_dir)["blocks"]
    assert blocks["knowledge-hits"].label == "Search hits, best first"
    assert blocks["knowledge-passages"].label == "Passages of the version picked"
    assert blocks["knowledge-hits"].show_label and blocks["knowledge-passages"].show_label
