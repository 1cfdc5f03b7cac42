"""What the Evaluate tab, Chat and Compare show of the support checks (plain Python, no browser)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from eval.checks.support import support_checks
from ui.views.answer_intent import chat_intent_line, intents_of
from ui.views.evaluation import (
    support_intent_rows,
    support_note,
    support_overview,
    worst_answer_rows,
)

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


def write_data(path):
    rows = [
        {"prompt": p.format(i=i), "response": r.format(i=i), "intent": k}
        for i in range(10)
        for k, (p, r) in TOPICS.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows[-6:]


def test_worst_answers_come_first_with_invented_spans_marked(tmp_path):
    data = tmp_path / "d.jsonl"
    rows = write_data(data)
    prompts, refs = [r["prompt"] for r in rows], [r["response"] for r in rows]
    tuned = list(refs)
    tuned[1] = (
        # a refund question, invented phone
        "Your parcel is on its way. Call 0161 496 0000 for news."
    )
    tuned[2] = "Your refund goes back to your card."  # a person was asked for: no hand-off
    support = support_checks(prompts, refs, {"base": refs, "tuned": tuned}, str(data), {})
    per_row = support.pop("per_row")
    report = SimpleNamespace(
        support=support,
        samples=[
            {
                "index": i,
                "prompt": p,
                "answers": {"base": refs[i], "tuned": tuned[i]},
                "checks": {m: per_row[m][i] for m in ("base", "tuned")},
            }
            for i, p in enumerate(prompts)
        ],
    )
    cols, table = worst_answer_rows(report, "tuned")
    assert cols[-1] == "tuned answer" and [r[0] for r in table[:2]] == [1, 2]
    assert table[0][4] == "invented phone: 0161 496 0000; wrong intent"
    assert "**⚠0161 496 0000**" in table[0][5]
    assert table[1][4] == "no hand-off to a person; wrong intent" and table[2][4] == "—"
    cols, overview = support_overview(report)
    assert overview[0][:2] == ["reference answers (ceiling)", "1.00 (6/6)"]
    assert overview[2] == ["tuned", "0.67 (4/6)", "0.50 (1/2)", "0.00 (0/4)", 1, 1, 0]
    _, intents = support_intent_rows(report, "tuned")
    assert intents[0][:3] == ["contact_human_agent", 2, 0.5] and intents[0][-1] == "yes"
    assert "intent classifier: TF-IDF" in support_note(report)


def test_chat_and_compare_name_the_intent_an_answer_addressed(tmp_path):
    data = tmp_path / "train.jsonl"
    write_data(data)
    shelf_get = SimpleNamespace(manifest={"data": {"path": str(data)}})
    fake = SimpleNamespace(get=lambda name: shelf_get)
    assert intents_of(
        fake,
        [None, "tuned"],
        ["Your refund goes back to your card.", "I'll connect you with a live agent."],
    ) == ["addressed: get_refund", "addressed: contact_human_agent"]
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "The tracking page shows it."},
    ]
    assert chat_intent_line(fake, "tuned", history) == "Last answer addressed: track_order"
    assert chat_intent_line(fake, "tuned", history[:1]) == ""
    empty = [*history[:1], {"role": "assistant", "content": [{"type": "text", "text": " "}]}]
    assert (
        chat_intent_line(fake, "tuned", empty) == "Last answer addressed: no intent (empty answer)"
    )
    gone = SimpleNamespace(
        get=lambda name: SimpleNamespace(manifest={"data": {"path": str(tmp_path / "gone.jsonl")}})
    )
    assert intents_of(gone, ["tuned"], ["x"]) == [
        f"intent not shown: its training data {tmp_path / 'gone.jsonl'} is not on this machine"
    ]


def test_the_adapters_tab_shows_the_floors_figures_of_the_recorded_verdict(home, random_lora_dir):
    from adapters.export import import_adapter
    from adapters.shelf.gate_rules import read_rules, record
    from adapters.shelf.store import Shelf
    from ui.views.shelf import details_markdown

    import_adapter(random_lora_dir, name="tuned")
    shelf = Shelf()
    figures = [
        "right-intent rate 0.93 (93/100 rows) reaches the floor 0.85",
        "0 leaked personal data",
    ]
    verdict = {
        "state": "passed",
        "reasons": [],
        "floors": figures,
        "rules": read_rules(shelf.path("tuned")),
    }
    record(shelf, "tuned", verdict, {"eval_id": "e1", "date": "2026-11-27T00:00:00"})
    text = details_markdown(shelf.get("tuned"))
    assert "- **Release gate:** passed (evaluation `e1`" in text
    assert (
        "  - right-intent rate 0.93 (93/100 rows) reaches the floor 0.85\n"
        "  - 0 leaked personal data" in text
    )
