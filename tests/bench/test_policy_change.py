"""bench/policy_change.py: the changed help center it grounds in, and its refusals."""

from __future__ import annotations

from bench import policy_change
from knowledge.importers import read_passages


def test_the_changed_help_center_says_the_new_policy_labelled_or_not(tmp_path):
    for labelled in (True, False):
        path = tmp_path / f"{labelled}" / "demo_help_center.md"
        path.parent.mkdir()
        path.write_text(policy_change.changed_articles(labelled), encoding="utf-8")
        articles = read_passages(path)
        refund = next(p for p in articles if p.title == "Our refund policy")
        assert policy_change.NEW in refund.text and policy_change.OLD not in refund.text
        assert refund.intent == ("check_refund_policy" if labelled else "")
        assert all(bool(p.intent) is labelled for p in articles)
    assert policy_change.says("within 60 days.", 60) and not policy_change.says("160 days", 60)


def test_an_adapter_it_cannot_measure_is_one_sentence(home, random_lora_dir, capsys):
    from adapters.export import import_adapter

    assert policy_change.main(["--adapter", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: no adapter named 'nope'")
    import_adapter(random_lora_dir, name="imported")  # trained beside no knowledge
    assert policy_change.main(["--adapter", "imported"]) == 2
    assert "trained beside no knowledge version" in capsys.readouterr().err
