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


def test_the_note_on_labels_without_past_answers_names_a_few_and_counts_the_rest(tmp_path):
    shelf = KnowledgeShelf(tmp_path / "home" / "knowledge")
    sections = [f"## Article {i}\n<!-- intent: intent_{i} -->\nText {i}.\n" for i in range(8)]
    (tmp_path / "help.md").write_text("".join(sections))
    said = actions.import_files([tmp_path / "help.md"], "kb", shelf=shelf)
    assert said.endswith(
        " Articles labelled with an intent take effect beside past answers of that intent, and "
        "kb v1 has none: import the past answers into the same knowledge base (8 labelled: "
        "intent_0 ('Article 0'), intent_1 ('Article 1'), intent_2 ('Article 2'), intent_3 "
        "('Article 3'), intent_4 ('Article 4') and 3 more)."
    )
    (tmp_path / "past.csv").write_text("question,answer,intent\nHi?,Hello.,intent_0\n")
    said = actions.import_files([tmp_path / "past.csv"], "kb", shelf=shelf)
    assert said.endswith(
        " 7 label(s) match no past answer's intent here, so those articles are shown as "
        "unlabelled ones are: intent_1 ('Article 1'), intent_2 ('Article 2'), intent_3 "
        "('Article 3'), intent_4 ('Article 4'), intent_5 ('Article 5') and 2 more. Check the "
        "spelling against the data's intents, or import past answers of those intents."
    )
