"""eval/checked.py and the gate's ``checked`` verdict: answers to the wrong question, checked
before they are sent against a labelled knowledge version, go out as the past answer of the
asked intent; the support checks score what is sent, and the gate passes those answers while
the plain ones fail. An alias serves such a version only when it checks."""

from __future__ import annotations

import json
from types import SimpleNamespace

from adapters.shelf.gate_rules import check_rules
from eval.checked import lines, section
from eval.checks.support import support_checks
from eval.gate import check, gate_lines
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf

TOPICS = {
    "track_order": (
        "where is my parcel {i}",
        "Your parcel {i} is on its way; the tracking page shows where it is.",
    ),
    "get_refund": (
        "I want my money back {i}",
        "Your refund {i} goes back to your card within 5 days.",
    ),
    "contact_human_agent": (
        "let me talk to a person {i}",
        "I'll connect you with a live agent now ({i}).",
    ),
}
RULES = {"slices_not_worse": [], "golden_not_worse": False, "perplexity_not_worse": False}


def evaluated(home):
    rows = [
        {"prompt": p.format(i=i), "response": r.format(i=i), "intent": k}
        for i in range(20)
        for k, (p, r) in TOPICS.items()
    ]
    data = home.parent / "support.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    held, known = rows[-18:], rows[:-18]
    KnowledgeShelf().add(
        "faq",
        [
            Passage(r["prompt"], r["response"], "faq", "past_answer", r["prompt"], r["intent"])
            for r in known
        ],
        ["faq"],
    )
    prompts, references = [r["prompt"] for r in held], [r["response"] for r in held]
    wrong = references[1:] + references[:1]  # each answer is another intent's
    texts = {"base": references, "tuned": wrong}
    support = support_checks(prompts, references, texts, str(data), {})
    per_row = support.pop("per_row")
    samples = [
        {
            "prompt": p,
            "answers": {m: texts[m][i] for m in texts},
            "checks": {m: per_row[m][i] for m in texts},
        }
        for i, p in enumerate(prompts)
    ]
    report = SimpleNamespace(
        models=["base", "tuned"],
        adapters=["tuned"],
        support=support,
        samples=samples,
        slices={},
        against={},
        deltas={"tuned": {}},
        golden={"total": 0, "results": []},
        grounding={},
        checked={},
    )
    rows_ = SimpleNamespace(prompts=prompts, references=references, slice_by=None)
    manifests = {"tuned": {"knowledge": {"name": "faq", "version": "v1"}}}
    return report, rows_, str(data), manifests


def test_checked_answers_are_scored_and_gated_beside_the_plain_ones(home, random_lora_dir):
    from alias_helpers import put_versions

    shelf = put_versions(random_lora_dir, {"tuned": None})
    report, rows, data, manifests = evaluated(home)
    report.checked = section(report, rows, data, shelf, manifests)
    part = report.checked["models"]["tuned"]
    assert part["served"] == "off"
    c = part["outcomes"]
    assert c["rows"] == 18 and c["re-answered"] + c["handed off"] >= 15
    for sample in report.samples:  # what is sent: kept as it was, or a past answer of faq
        sent, said = sample["checked"]["answers"]["tuned"], sample["answers"]["tuned"]
        outcome = sample["checked"]["outcomes"]["tuned"]
        assert (sent == said) == (outcome in ("ok", "skipped"))
    assert report.support["models"]["tuned"]["right_intent"]["rate"] == 0.0
    assert part["support"]["right_intent"]["rate"] >= 0.8
    verdict = check(report, "tuned", check_rules(RULES))
    assert verdict["state"] == "failed"
    assert verdict["checked"]["state"] == "passed", verdict["checked"]["reasons"]
    assert "re-answered" in verdict["checked"]["outcomes"]
    said = "\n".join(gate_lines(SimpleNamespace(gate={"tuned": verdict})))
    assert "release gate of tuned, checked before it speaks (ok " in said and ": passed (" in said
    assert lines(report.checked)[1].startswith("| model | grounding | ok | re-answered")


def test_a_version_that_passes_only_checked_serves_only_behind_an_alias_that_checks(
    home, random_lora_dir
):
    import pytest
    from alias_helpers import PASSED, put_versions, set_gate

    from adapters.shelf.alias_rules import AliasError
    from adapters.shelf.aliases import AliasBook

    shelf = put_versions(random_lora_dir, {"v7": None})
    set_gate("v7", {**PASSED, "state": "failed", "checked": {"state": "passed"}}, shelf)
    book = AliasBook(shelf)
    with pytest.raises(AliasError, match="checked before it speaks: passed"):
        book.set("bot", {"v7": 100}, by="ana")
    book.set("bot", {"v7": 100}, by="ana", check="on")
    with pytest.raises(AliasError, match="release gate of v7: failed"):
        book.set("bot", None, by="ben", check="off")  # it would serve unchecked answers
    assert book.row("bot")["check"] == "on"
