"""The judge client against a stand-in endpoint on 127.0.0.1: grades, garbage,
refusals, no server."""

from __future__ import annotations

import time

import pytest
from judge_helpers import FakeJudge, closed_port_url, grades_by_word, no_schema, not_json, prose

from eval.judge import (
    KEY_ENV,
    SCHEMA,
    JudgeConfig,
    config_from,
    grade_all,
    messages_for,
)
from eval.judge_grades import GRADED, NOT_ASKED, UNPARSEABLE

ITEMS = [
    ("Where is my order?", "It ships today.", "Your order ships today."),
    ("Cancel it", "Our store opens at 9.", "I cancelled the order."),
    ("Refund?", "It ships tomorrow.", None),
]


def fast(url: str, **settings) -> JudgeConfig:
    return config_from(url, "judge-model", **{"timeout": 5, "retries": 0, **settings})


@pytest.mark.parametrize(
    "url, base",
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1"),
        ("https://api.example.com/v1/", "https://api.example.com/v1"),
        ("http://h:1/v1/chat/completions", "http://h:1/v1"),
        ("https://api.example.com/openai/v1", "https://api.example.com/openai/v1"),
    ],
)
def test_the_url_becomes_the_clients_base_url(url, base):
    assert JudgeConfig(url, "m").base_url == base


def test_bad_settings_are_all_named_at_once(monkeypatch):
    with pytest.raises(ValueError) as err:
        config_from("ftp://x", " ", timeout=0, workers=100)
    text = str(err.value)
    assert "http(s)://host" in text and "'ftp://x'" in text and "judge's model" in text
    assert "timeout must be from 1" in text and "workers must be from 1 to 32" in text
    monkeypatch.setenv(KEY_ENV, "from-env")
    assert config_from("http://h", "m").key == "from-env"
    assert config_from("http://h", "m", "given").key == "given"
    assert "key" not in config_from("http://h", "m", "secret").describe()


def test_the_question_reference_and_answer_are_sent_with_the_rubric():
    system, user = messages_for("Where is my order?", "It ships.", "Soon.")
    assert all(k in system["content"] for k in ('"addresses"', '"correct"', '"polite"', '"safe"'))
    assert (
        user["content"].index("Where is my order?")
        < user["content"].index("Soon.")
        < user["content"].index("It ships.")
    )
    assert "Reference answer: none" in messages_for("q", "a")[1]["content"]


def test_grades_come_back_in_order_with_the_schema_asked():
    with FakeJudge(grades_by_word("ships")) as judge:
        grades, problem = grade_all(fast(judge.url, workers=2), ITEMS)
    assert problem is None
    assert [(g["status"], g["passed"]) for g in grades] == [
        (GRADED, True),
        (GRADED, False),
        (GRADED, True),
    ]
    assert len(judge.requests) == 3
    assert all(
        r["path"] == "/v1/chat/completions" and r["response_format"] == SCHEMA
        for r in judge.requests
    )
    assert {r["model"] for r in judge.requests} == {"judge-model"} and judge.requests[0][
        "temperature"
    ] == 0


def test_an_endpoint_refusing_the_schema_is_asked_again_without_it_once():
    with FakeJudge(no_schema(grades_by_word("ships"))) as judge:
        grades, problem = grade_all(fast(judge.url, workers=1), ITEMS)
    assert problem is None and [g["passed"] for g in grades] == [True, False, True]
    # the first answer: with the schema (400), then without; the others without from the start
    assert ["response_format" in r for r in judge.requests] == [True, False, False, False]


def test_prose_is_unparseable_never_guessed():
    with FakeJudge(prose) as judge:
        grades, problem = grade_all(fast(judge.url), ITEMS)
    assert problem is None  # the judge answered; eval.judge_run says that none of it was a grade
    assert {g["status"] for g in grades} == {UNPARSEABLE}
    assert grades[0]["reply"].startswith("I think this answer is quite good")


def test_a_body_that_is_not_a_chat_completion_stops_the_judge_with_a_sentence():
    with FakeJudge(not_json) as judge:
        grades, problem = grade_all(fast(judge.url, workers=1), ITEMS)
    assert problem.startswith(
        f"the judge at {judge.url}/v1 (model 'judge-model') answered something that is "
        "not a chat completion"
    )
    assert len(judge.requests) == 1  # stopped at the first reply
    assert [g["status"] for g in grades] == [NOT_ASKED] * 3


def test_an_unreachable_judge_is_one_sentence_after_its_retries_not_one_per_answer():
    url = closed_port_url()
    start = time.perf_counter()
    grades, problem = grade_all(fast(url, retries=1, workers=1), ITEMS * 10)
    assert problem.startswith(f"the judge at {url}/v1 (model 'judge-model') could not be reached")
    assert "2 tries" in problem
    assert {g["status"] for g in grades} == {NOT_ASKED}
    assert time.perf_counter() - start < 10  # one answer's retries, not thirty


def test_an_http_error_names_its_status():
    with FakeJudge(lambda r: (401, {"error": {"message": "bad key"}})) as judge:
        _, problem = grade_all(fast(judge.url), ITEMS[:1])
    assert "answered HTTP 401" in problem and "bad key" in problem


def test_a_request_refused_alone_fails_that_answer_only_and_keeps_the_schema():
    def reply(request):
        if "Cancel it" in request["messages"][-1]["content"]:
            return 400, {"error": {"message": "the prompt is too long"}}
        return grades_by_word("ships")(request)

    with FakeJudge(reply) as judge:
        grades, problem = grade_all(fast(judge.url, workers=1), ITEMS)
    assert problem is None
    assert [g["status"] for g in grades] == ["graded", "failed", "graded"]
    assert "refused this request" in grades[1]["error"] and "too long" in grades[1]["error"]
    assert ["response_format" in r for r in judge.requests] == [True, True, False, True]
