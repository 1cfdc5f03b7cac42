"""knowledge/store.py: versions are immutable, numbered, fingerprinted; delete removes them."""

from __future__ import annotations

import pytest

from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf

A = [Passage("Refunds", "Paid within 30 days.", "kb.md#Refunds")]
B = [Passage("Shipping", "Two to five days.", "kb.md#Shipping")]


def test_each_import_is_a_new_version_and_old_ones_stay_as_they_were(home):
    shelf = KnowledgeShelf()
    v1, made = shelf.add("kb", A, ["kb.md"])
    assert made and v1.version == "v1" and v1.passages == 1
    v2, made = shelf.add("kb", B, ["kb2.md"])
    assert made and (v2.version, v2.passages, v2.sources) == ("v2", 2, ["kb.md", "kb2.md"])
    assert [p for _, p in shelf.get("kb", "v1").passages_page()] == A
    assert [p for _, p in shelf.get("kb").passages_page()] == A + B
    assert shelf.get("kb", "v1").fingerprint == v1.fingerprint != v2.fingerprint
    assert (home / "knowledge" / "kb" / "v1" / "index.sqlite").is_file()


def test_the_same_content_makes_no_new_version(home):
    shelf = KnowledgeShelf()
    shelf.add("kb", A + B, ["kb.md"])
    again, made = shelf.add("kb", A + B, ["kb.md"])
    assert not made and again.version == "v1"
    shelf.add("kb", [OTHER], ["faq.md"])
    again, made = shelf.add("kb", A + B, ["kb.md"])  # imported again among others: no change
    assert not made and again.version == "v2"
    assert [v.version for v in shelf.versions("kb")] == ["v1", "v2"]


OTHER = Passage("Gift cards", "They never expire.", "faq.md#Gift cards")


def test_a_file_imported_again_replaces_its_own_passages_in_place(home):
    """The help center changed: the new text of a section replaces the old one (never both),
    a section taken out goes, another file's passages stay as they were."""
    shelf = KnowledgeShelf()
    shelf.add("kb", A + B, ["kb.md"])
    shelf.add("kb", [OTHER], ["faq.md"])
    faster = Passage("Refunds", "Paid within 5 days.", "kb.md#Refunds")
    v3, made = shelf.add("kb", [faster], ["kb.md"])  # Shipping taken out, Refunds changed
    assert made and [p for _, p in v3.passages_page()] == [faster, OTHER]
    assert v3.search("when are refunds paid", k=3)[0].passage.text == "Paid within 5 days."
    assert [p for _, p in shelf.get("kb", "v2").passages_page()] == [*A, *B, OTHER]  # as it was
    rows = [
        Passage("q1", "a1", "faq.csv:row 1", "past_answer", "q1"),
        Passage("q2", "a2", "faq.csv:row 2", "past_answer", "q2"),
    ]
    shelf.add("kb", rows, ["faq.csv"])  # "faq.csv" is not "faq.md": both kept
    relabelled = [Passage("q1", "a1", "faq.csv:row 1", "past_answer", "q1", "cancel_order")]
    v5, _ = shelf.add("kb", relabelled, ["faq.csv"])
    assert [p for _, p in v5.passages_page()] == [faster, OTHER, *relabelled]


def test_a_deleted_version_number_is_never_given_again(home):
    """An alias pinned to kb@v2 must not come back to content nobody evaluated."""
    shelf = KnowledgeShelf()
    shelf.add("kb", A, ["a"])
    v2, _ = shelf.add("kb", B, ["b"])
    shelf.delete("kb", "v2")
    v3, _ = shelf.add("kb", [OTHER], ["c"])
    assert v3.version == "v3" and v3.fingerprint != v2.fingerprint
    with pytest.raises(ValueError, match=r"kb has no version 'v2' \(versions: v1, v3\)"):
        shelf.get("kb", "v2")
    shelf.delete("kb")
    assert shelf.names() == []
    again, _ = shelf.add("kb", A, ["a"])
    assert again.version == "v4"


def test_replace_keeps_only_the_new_passages(home):
    shelf = KnowledgeShelf()
    shelf.add("kb", A, ["a"])
    v2, _ = shelf.add("kb", B, ["b"], replace=True)
    assert [p for _, p in v2.passages_page()] == B and v2.sources == ["b"]


def test_search_finds_in_the_chosen_version(home):
    shelf = KnowledgeShelf()
    shelf.add("kb", A, ["a"])
    shelf.add("kb", B, ["b"])
    assert [
        h.passage.title for h in shelf.get("kb", "v1").search("how many days for shipping")
    ] == ["Refunds"]
    assert shelf.get("kb").search("how many days for shipping")[0].passage.title == "Shipping"


def test_unknown_names_and_versions_are_sentences(home):
    shelf = KnowledgeShelf()
    with pytest.raises(ValueError, match="no knowledge base named 'nope'"):
        shelf.get("nope")
    shelf.add("kb", A, ["a"])
    with pytest.raises(ValueError, match=r"kb has no version 'v7' \(versions: v1\)"):
        shelf.get("kb", "v7")
    with pytest.raises(ValueError, match="invalid knowledge base name"):
        shelf.add("../up", A, ["a"])
    with pytest.raises(ValueError, match="no passage"):
        shelf.add("kb", [], ["a"])


def test_delete_a_version_then_all(home):
    shelf = KnowledgeShelf()
    shelf.add("kb", A, ["a"])
    shelf.add("kb", B, ["b"])
    assert shelf.delete("kb", "v1") == ["v1"]
    assert [v.version for v in shelf.versions("kb")] == ["v2"]
    assert shelf.delete("kb") == ["v2"]
    assert shelf.names() == [] and not list((home / "knowledge" / "kb").glob("v*"))
    with pytest.raises(ValueError):
        shelf.delete("kb")


def test_find_by_extra_facts(home):
    shelf = KnowledgeShelf()
    shelf.add("kb", A, ["a"], extra={"dataset_fingerprint": "abc"})
    shelf.add("kb", B, ["b"], extra={"dataset_fingerprint": "def"})
    assert shelf.find("kb", dataset_fingerprint="abc").version == "v1"
    assert shelf.find("kb", dataset_fingerprint="zzz") is None


def test_a_passage_imported_again_with_its_intent_takes_it_and_is_not_doubled(home):
    shelf = KnowledgeShelf()
    plain = Passage(
        "cancel", "Open My Orders and cancel.", "faq.csv:row 1", "past_answer", "cancel"
    )
    first, _ = shelf.add("faq", [plain], ["faq.csv"])
    labelled = Passage(
        *[getattr(plain, f) for f in ("title", "text", "source", "kind")], "cancel", "cancel_order"
    )
    assert plain.to_dict() == {k: v for k, v in labelled.to_dict().items() if k != "intent"}
    again, made = shelf.add("faq", [labelled], ["faq.csv"])
    assert made and [p for _, p in again.passages_page()] == [labelled]
    assert first.fingerprint != again.fingerprint and "intent" not in plain.to_dict()


@pytest.mark.parametrize("name", ["auto", "off", "OFF"])
def test_the_words_that_say_how_to_ground_are_no_knowledge_base_names(home, name):
    with pytest.raises(ValueError, match="it says how to ground"):
        KnowledgeShelf().add(name, [Passage("Refunds", "Paid in 30 days.", "kb.md")], ["kb.md"])
    assert KnowledgeShelf().names() == []
