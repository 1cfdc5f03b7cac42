"""bench/followups.py: on the demo's knowledge, follow-ups read as grounding reads them find the
request they follow up where the second message alone does not; bad files are one sentence."""

from __future__ import annotations

import json

from bench import followups


def test_follow_ups_find_their_request_and_switches_keep_the_new_one(home, capsys):
    assert followups.main(["--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert list(results) == list(followups.KINDS)
    follow, switch = results["follow-up"], results["switch"]
    assert follow["conversations"] == switch["conversations"] == 54
    alone, read = (
        follow[f"right passage first, {how}"] for how in ("alone", "as grounding reads it")
    )
    assert read >= alone + 10, follow
    sent = [follow[f"right answer sent as it is, {h}"] for h in ("alone", "as grounding reads it")]
    assert sent[1] >= sent[0] + 10, follow
    assert switch["read with the earlier message"] <= 5, switch  # a new question is read alone
    assert switch["right passage first, as grounding reads it"] >= 48, switch


def test_a_conversations_file_it_cannot_read_is_one_sentence(home, tmp_path, capsys):
    bad = tmp_path / "talks.jsonl"
    bad.write_text('{"first": "hi", "second": "and?"}\n')
    assert followups.main(["--conversations", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: talks.jsonl line 1 needs the text fields first, second, second_intent, kind"
    )
    assert followups.main(["--knowledge", "nope"]) == 2
    assert "no knowledge base named 'nope'" in capsys.readouterr().err


def test_an_adapter_it_cannot_have_answer_is_one_sentence(home, random_lora_dir, capsys):
    from adapters.export import import_adapter

    talks = followups.CONVERSATIONS
    assert followups.main(["--adapter", "nope", "--conversations", str(talks)]) == 2
    assert capsys.readouterr().err.startswith("error: no adapter named 'nope'")
    import_adapter(random_lora_dir, name="imported")  # trained beside no knowledge
    assert followups.main(["--adapter", "imported"]) == 2
    assert "trained beside no knowledge version" in capsys.readouterr().err


def test_an_adapter_answers_each_conversation_both_ways(home, random_lora_dir, tiny_llama_dir):
    """The plumbing of ``--adapter`` on the tiny model (its answers are noise: only the counts'
    shape and sums are checked), answered by PyTorch."""
    from adapters.export import import_adapter
    from knowledge.passages import Passage
    from knowledge.store import KnowledgeShelf

    rows = [
        ("I want a refund", "We refund your card in 5 days.", "get_refund"),
        ("refund my order please", "Your refund is on its way.", "get_refund"),
        ("how long does shipping take", "Delivery takes 3 to 5 days.", "delivery_period"),
        ("when will my parcel arrive", "It arrives in 3 to 5 days.", "delivery_period"),
    ]
    KnowledgeShelf().add(
        "answers", [Passage(q, a, f"d:train row {i}", "past_answer", q, y)
                    for i, (q, a, y) in enumerate(rows, start=1)], ["d"],
    )  # fmt: skip
    entry = import_adapter(random_lora_dir, name="bot")
    manifest_path = entry.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["base_model"] = {**(manifest.get("base_model") or {}), "name": str(tiny_llama_dir)}
    manifest["knowledge"] = {"name": "answers", "version": "v1"}
    manifest_path.write_text(json.dumps(manifest))
    talks = [
        {"first": "I want a refund", "second": "how long will that take?",
         "second_intent": "get_refund", "kind": "follow-up"},
        {"first": "I want a refund", "second": "when will my parcel arrive",
         "second_intent": "delivery_period", "kind": "switch"},
    ]  # fmt: skip
    out = followups.answer_measure("bot", talks, engine="pytorch", answer_tokens=8)
    assert out["knowledge"] == "answers v1" and out["engine"].startswith("pytorch")
    assert list(out["kinds"]) == ["follow-up", "switch"]
    for n in out["kinds"].values():
        assert n["conversations"] == 1
        for how in ("alone", "as grounding reads it"):
            said = n[f"answer of the needed intent, {how}"]
            sent = n[f"checked answer of the needed intent, {how}"]
            assert said in (0, 1) and sent + n[f"handed off, {how}"] <= 1
