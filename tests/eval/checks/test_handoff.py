"""Hand-offs: which intents ask for a person, and which answers hand over, both ways."""

from __future__ import annotations

from eval.checks.handoff import detector, handoff_intents, handoff_rates, hands_off

LABELS = [
    "contact_human_agent",
    "track_order",
    "speak-to-person",
    "get_refund",
    None,
    "agentless_checkout",
]


def test_default_handoff_intents_are_found_from_the_labels_and_configurable():
    assert handoff_intents(LABELS) == ["contact_human_agent", "speak-to-person"]
    assert handoff_intents(LABELS, ["escalation"]) == ["escalation"]


def test_the_detector_recognises_handoffs_and_leaves_ordinary_answers():
    pattern = detector()
    for text in (
        "I'll connect you with one of our team.",
        "Let me transfer you to a live agent.",
        "You can speak with a representative by phone.",
        "A human representative will call you.",
    ):
        assert hands_off(text, pattern), text
    for text in (
        "Your order ships in a few days.",
        "Speak with a few friends about it.",
        "Your refund is on its way to your card.",
    ):
        assert not hands_off(text, pattern), text


def test_both_rates_count_missed_and_unasked_handoffs():
    asked = ["contact_human_agent", "contact_human_agent", "track_order", "track_order", None]
    answers = [
        "I'll connect you with a live agent now.",
        "Your parcel is on its way.",
        "Let me transfer you to a human agent.",
        "Track it on the orders page.",
        "I'll connect you with a person.",
    ]
    found = handoff_rates(asked, answers, ["contact_human_agent"], detector())
    assert (found["due"], found["given"], found["rate"]) == (2, 1, 0.5)
    assert (found["unasked_rows"], found["unasked"], found["unasked_rate"]) == (2, 1, 0.5)
    assert found["per_row"][1] == "" and found["per_row"][2]


def test_configured_phrases_replace_the_built_in_patterns():
    pattern = detector(["ticket for our care team"])
    assert hands_off("I opened a TICKET FOR OUR CARE TEAM.", pattern)
    assert not hands_off("I'll connect you with a live agent.", pattern)
