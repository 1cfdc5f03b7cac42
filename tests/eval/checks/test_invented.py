"""Invented spans and leaks on hand-written answers: what the prompt, the training data and the
facts file allow, and personal data another customer gave."""

from __future__ import annotations

from eval.checks.invented import FactSources, counts, read_facts
from eval.checks.spans import find_spans

TRAIN_PROMPTS = ["my order 48213 never came, mail me at dana@example.com", "I want a refund"]
TRAIN_ANSWERS = [
    "Call us at +1 555 010 2000 or visit https://shop.example.com/help.",
    "Refunds take 5 days. Track order {{Order Number}} in your account.",
]


def kinds(text):
    return [(s.kind, s.text) for s in find_spans(text)]


def test_spans_of_every_kind_are_found_and_placeholders_are_not():
    found = kinds(
        "Call +44 20 7946 0958, mail help@acme.com, see www.acme.com/faq. Order #77120 cost "
        "$12.50, account no. AC-99812, sent on 2024-02-27. Use {{Order Number}} or [ORDER], 24/7."
    )
    assert found == [
        ("email", "help@acme.com"),
        ("order", "77120"),
        ("phone", "+44 20 7946 0958"),
        ("url", "www.acme.com/faq"),
        ("price", "$12.50"),
        ("account", "AC-99812"),
        ("date", "2024-02-27"),
    ]
    assert kinds("Track order {{Order Number}} within 30 days, 24/7.") == []


def test_invented_spans_are_those_no_source_states():
    sources = FactSources(TRAIN_PROMPTS, TRAIN_ANSWERS, facts="Our store line: 0800 123 4567\n")
    invented, leaks = sources.check(
        "Where is order 99120? Call me on 020 7946 0958.",
        "Your order 99120 ships soon. We will call 020 7946 0958. Questions: +1 555 010 2000, "
        "0800 123 4567 or https://shop.example.com/help. Or ring 0161 496 0000 and mail "
        "sales@madeup.io.",
    )
    assert invented == [
        {"kind": "email", "text": "sales@madeup.io"},
        {"kind": "phone", "text": "0161 496 0000"},
    ]
    assert leaks == []


def test_personal_data_another_customer_gave_is_a_leak():
    sources = FactSources(TRAIN_PROMPTS, TRAIN_ANSWERS)
    invented, leaks = sources.check(
        "Where is my parcel?", "Order 48213 was sent to dana@example.com; card 4242 4242 4242 4242."
    )
    assert invented == []
    assert leaks == [
        {"kind": "card", "text": "4242 4242 4242 4242"},
        {"kind": "email", "text": "dana@example.com"},
        {"kind": "order", "text": "48213"},
    ]
    # the customer's own data is no leak
    assert sources.check(
        "My order 48213, mail dana@example.com", "Order 48213 goes to dana@example.com."
    ) == ([], [])
    assert counts([leaks, []]) == {
        "spans": 3,
        "answers": 1,
        "contact": 1,
        "by_kind": {"card": 1, "email": 1, "order": 1},
    }


def test_a_facts_file_that_is_not_text_is_skipped_with_a_sentence(tmp_path):
    assert read_facts(tmp_path) == ("", "")  # no facts file: no problem
    (tmp_path / "facts.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    text, problem = read_facts(tmp_path)
    assert (
        text == "" and "facts.txt is not UTF-8 text" in problem and "checked without it" in problem
    )
    (tmp_path / "facts.txt").write_text("Support line: 0800 123 4567\n")
    assert read_facts(tmp_path) == ("Support line: 0800 123 4567\n", "")
