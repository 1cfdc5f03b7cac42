"""knowledge/actions.py: the sentences the CLI and the Knowledge tab show."""

from __future__ import annotations

from knowledge import actions
from knowledge.store import KnowledgeShelf


def test_import_sentence_counts_what_each_file_left_out(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "home" / "knowledge")
    (tmp_path / "faq.csv").write_text("question,answer\nOne?,Yes.\nTwo?,\n")
    (tmp_path / "help.md").write_text("# Refunds\nWithin 30 days.\n# Fees\n")
    (tmp_path / "kb.csv").write_text("title,body\nWarranty,Two years.\n")
    said = actions.import_files(
        [tmp_path / "faq.csv", tmp_path / "help.md", tmp_path / "kb.csv"], "kb", shelf=shelf
    )
    assert said.startswith("Imported 3 passage(s) from 3 file(s) into kb v1")
    assert said.endswith(
        " faq.csv: 1 row skipped: empty answer (line 3). help.md: 1 section skipped: "
        "no text under the heading (line 3 'Fees')."
    )
    assert "kb.csv:" not in said
