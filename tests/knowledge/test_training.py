"""knowledge/training.py: a training run's past answers on the shelf, beside what was imported."""

from __future__ import annotations

from knowledge import actions
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs

ARTICLE = "## Our refund policy\n<!-- intent: check_refund_policy -->\nRefunds within 60 days.\n"


def pairs(*answers):
    return [f"question {i}" for i in range(len(answers))], list(answers)


def test_training_on_new_data_keeps_the_articles_imported_beside_its_past_answers(
    tmp_path,
):
    """knowledge.md's 'When a policy changes': the article goes into answers-<data file>. The
    next training run on changed data made a version of its training split alone, so the
    article, and the changed policy, left the newest version an alias grounded in it serves."""
    shelf = KnowledgeShelf(tmp_path / "knowledge")
    questions, answers = pairs("Refunds within 30 days.", "Track it in My Orders.")
    first = shelve_pairs(
        questions, answers, dataset_fingerprint="a", data_path="support.jsonl", shelf=shelf
    )
    (tmp_path / "help.md").write_text(ARTICLE)
    actions.import_files([tmp_path / "help.md"], first.name, shelf=shelf)
    (tmp_path / "faq.csv").write_text("question,answer\nGift cards?,They never expire.\n")
    actions.import_files([tmp_path / "faq.csv"], first.name, shelf=shelf)
    questions, answers = pairs("Refunds within 30 days, always.", "Cancel it in My Orders.")
    second = shelve_pairs(
        questions, answers, dataset_fingerprint="b", data_path="support.jsonl", shelf=shelf
    )
    texts = {p.text: p for _, p in second.passages_page()}
    assert set(texts) == {
        "Refunds within 60 days.",  # the article, still labelled
        "They never expire.",  # a past answer imported by hand
        "Refunds within 30 days, always.",  # the new training split ...
        "Cancel it in My Orders.",
    }  # ... and none of the old one
    assert texts["Refunds within 60 days."].intent == "check_refund_policy"
    assert set(second.sources) == {"help.md", "faq.csv", "support.jsonl"}
    assert second.extra == {"dataset_fingerprint": "b", "split": "train"}
    again = shelve_pairs(
        questions, answers, dataset_fingerprint="b", data_path="support.jsonl", shelf=shelf
    )
    assert again.version == second.version  # the same data: the same version
