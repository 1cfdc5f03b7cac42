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
