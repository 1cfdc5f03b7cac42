"""knowledge/importers.py: each format becomes the passages it holds; bad input is a sentence."""

from __future__ import annotations

import json

import pytest

from knowledge.importers import ImportProblem, read_file, read_passages


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_markdown_splits_by_heading_and_keeps_code_fences(tmp_path):
    path = write(
        tmp_path,
        "help.md",
        "Intro line.\n# Refunds\nWithin 30 days.\n```\n# not a heading\n```\n"
        "## Shipping\nTwo to five days.\n",
    )
    passages = read_passages(path)
    assert [p.title for p in passages] == ["help", "Refunds", "Shipping"]
    assert "# not a heading" in passages[1].text
    assert passages[2].text == "Two to five days." and passages[2].source == "help.md#Shipping"
    assert {p.kind for p in passages} == {"article"}


def test_html_strips_tags_scripts_and_takes_the_title(tmp_path):
    page = (
        "<html><head><title>Return policy</title><style>p{color:red}</style></head><body>"
        "<h1>Returns</h1><p>Send it back within <b>30</b> days.</p><script>alert(1)</script>"
        "</body></html>"
    )
    (passage,) = read_passages(write(tmp_path, "returns.html", page))
    assert passage.title == "Return policy"
    assert passage.text == "Returns\nSend it back within 30 days."


def test_html_title_falls_back_to_h1(tmp_path):
    (passage,) = read_passages(write(tmp_path, "p.htm", "<h1>Gift cards</h1><p>Never expire.</p>"))
    assert passage.title == "Gift cards"


def test_plain_text_is_one_passage_titled_by_its_first_line(tmp_path):
    (passage,) = read_passages(
        write(tmp_path, "macro.txt", "\nGreeting macro\nHello {{Customer Name}}!\n"), kind="macro"
    )
    assert (passage.title, passage.kind) == ("Greeting macro", "macro")
    assert passage.text == "Greeting macro\nHello {{Customer Name}}!"


def test_csv_question_answer_rows_are_past_answers(tmp_path):
    path = write(
        tmp_path,
        "faq.csv",
        "question,answer\nWhere is my order?,Track it in My Orders.\nEmpty answer?,\n",
    )
    (passage,) = read_passages(path)
    assert (passage.kind, passage.question, passage.text) == (
        "past_answer",
        "Where is my order?",
        "Track it in My Orders.",
    )
    assert passage.source == "faq.csv:row 1"


def test_bitext_columns_use_the_training_data_names(tmp_path):
    path = write(
        tmp_path,
        "bitext.csv",
        "flags,instruction,category,intent,response\n"
        "B,cancel my order,ORDER,cancel_order,Open My Orders and cancel.\n",
    )
    (passage,) = read_passages(path)
    assert passage.question == "cancel my order" and passage.text == "Open My Orders and cancel."
    assert passage.intent == "cancel_order"  # the intent column, before category
    assert read_passages(path, kind="macro")[0].intent == "cancel_order"


def test_csv_title_body_rows_are_articles(tmp_path):
    (passage,) = read_passages(
        write(tmp_path, "kb.csv", "title,body\nWarranty,Two years on all items.\n")
    )
    assert (passage.title, passage.text, passage.kind) == (
        "Warranty",
        "Two years on all items.",
        "article",
    )


def test_jsonl_demo_format_and_messages(tmp_path):
    demo = json.dumps(
        {"instruction": "refund?", "intent": "get_refund", "response": "Here is how."}
    )
    chat = json.dumps(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "late parcel"},
                {"role": "assistant", "content": "Sorry, tracking says..."},
            ]
        }
    )
    assert [
        (p.question, p.text) for p in read_passages(write(tmp_path, "d.jsonl", demo + "\n"))
    ] == [("refund?", "Here is how.")]
    assert [
        (p.question, p.text) for p in read_passages(write(tmp_path, "c.jsonl", chat + "\n"))
    ] == [("late parcel", "Sorry, tracking says...")]
    parts = json.dumps(  # OpenAI's content parts, as /v1 takes them and chat-log exports hold
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Parts question?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Parts answer."}]},
            ]
        }
    )
    assert [
        (p.question, p.text) for p in read_passages(write(tmp_path, "p.jsonl", parts + "\n"))
    ] == [("Parts question?", "Parts answer.")]


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("a.md", b"\x00\x01binary", "is not text"),
        ("b.md", b"   \n", "is empty"),
        ("c.txt", b"\xff\xfe\xfa", "is not UTF-8"),
        ("d.csv", b"foo,bar\n1,2\n", "cannot tell which columns"),
        ("e.pdf", b"%PDF", "unknown file type"),
        ("f.jsonl", b"{not json\n", "line 1 is not JSON"),
        ("g.jsonl", b'{"instruction": "a", "response": "b"}\n\nnot json\n', "line 3 is not JSON"),
        ("h.jsonl", b'{"instruction": "a", "response": "b"}\n[1, 2]\n', "line 2 is a JSON list"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, name, content, said):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ImportProblem, match=said) as err:
        read_passages(path)
    assert "\n" not in str(err.value) and name in str(err.value)


def test_rows_left_out_are_counted_by_reason_and_line(tmp_path):
    path = write(
        tmp_path,
        "faq.csv",
        "question,answer\n"
        "Where is my order?,Track it in My Orders.\n"
        "Empty answer?,\n"
        '"A question\nover two lines",\n'
        "Gift cards?,They never expire.\n"
        "Blank too?,   \n",
    )
    found = read_file(path)
    assert [p.question for p in found.passages] == ["Where is my order?", "Gift cards?"]
    assert found.note == "faq.csv: 3 rows skipped: empty answer (lines 3, 4, 7)."


def test_jsonl_rows_whose_answer_is_not_text_are_counted_apart(tmp_path):
    rows = [
        {"instruction": "refund?", "response": "Here is how."},
        {"instruction": "how many days?", "response": 30},
        {"instruction": "no answer", "response": None},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"instruction": "list?", "response": ["a", "b"]},
    ]
    lines = [json.dumps(r) for r in rows]
    text = "\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:])
    found = read_file(write(tmp_path, "d.jsonl", text + "\n"))
    assert [p.text for p in found.passages] == ["Here is how."]
    assert found.note == (
        "d.jsonl: 4 rows skipped: answer is not text (lines 2, 6), empty answer (lines 4, 5)."
    )


def test_articles_with_an_empty_body_and_empty_sections_are_counted(tmp_path):
    found = read_file(
        write(tmp_path, "kb.csv", "title,body\nWarranty,Two years.\nReturns,\nGift cards,  \n")
    )
    assert found.note == "kb.csv: 2 rows skipped: empty body (lines 3, 4)."
    md = write(
        tmp_path,
        "help.md",
        "# Help center\n## Refunds\nWithin 30 days.\n## Shipping\n\n## Fees\n"
        "<!-- intent: fees -->\n## Warranty\nTwo years.\n",
    )
    found = read_file(md)
    assert [p.title for p in found.passages] == ["Refunds", "Warranty"]
    # "Help center" heads the sections under it: structure, not a section left out
    assert found.note == (
        "help.md: 2 sections skipped: no text under the heading (line 4 'Shipping', line 6 'Fees')."
    )


def test_a_file_whose_rows_are_all_left_out_says_why(tmp_path):
    path = write(tmp_path, "faq.csv", "question,answer\nOne?,\nTwo?,\n")
    with pytest.raises(ImportProblem, match=r"faq.csv holds no passage with text") as err:
        read_passages(path)
    assert "2 rows skipped: empty answer (lines 2, 3)" in str(err.value)


def test_a_clean_file_has_no_note(tmp_path):
    found = read_file(write(tmp_path, "kb.csv", "title,body\nWarranty,Two years.\n"))
    assert found.note == "" and found.skipped == ()
