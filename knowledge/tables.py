"""Rows of a table (a CSV, a JSON-lines file) become passages, by the columns it has.

``question``/``answer`` columns (or any pair the training data's column names allow, such as
Bitext's ``instruction``/``response``) make past answers, keeping an ``intent`` column with
each; a ``messages`` column makes its last user turn and the answer a pair; ``title``/``body``
(or ``text``) make articles, labelled by an ``intent`` column. A row that gives no passage (an
empty answer, an answer that is not text, no exchange) is left out and counted
(:class:`knowledge.import_report.Skip`), so the import can say so.
"""

from __future__ import annotations

from core.columns import MESSAGES_NAMES, PROMPT_NAMES, RESPONSE_NAMES
from core.user_text import cut
from knowledge.import_report import ImportProblem, Skip
from knowledge.passages import Passage

TITLE_NAMES = ("title", "name", "subject", "heading")
BODY_NAMES = ("body", "text", "content", "article", "macro")
LABEL_NAMES = ("intent", "category", "tag", "label")  # as the release checks look for one


def table_passages(
    rows: list[dict],
    columns: list[str],
    source: str,
    *,
    numbers: list[int] | None = None,
    unit: str = "row",
    skipped: list[Skip] | None = None,
) -> list[Passage]:
    """Rows of a table as passages, by the column layout they show.

    Args:
        numbers: where each row is, counted in ``unit`` (a CSV's or JSON-lines file's line
            numbers); None: the rows' numbers from 1.
        unit: what ``numbers`` count: ``"line"``, ``"row"``, ``"item"``.
        skipped: where the rows that give no passage are added, with their reason.

    Raises:
        ImportProblem: the columns hold neither question/answer pairs, nor messages, nor
            title/body articles.
    """
    lower = {c.lower(): c for c in columns if isinstance(c, str)}
    question = _first(lower, PROMPT_NAMES)
    answer = _first(lower, RESPONSE_NAMES, exclude=question)
    messages = _first(lower, MESSAGES_NAMES)
    title, body = _first(lower, TITLE_NAMES), _first(lower, BODY_NAMES)
    label = _first(lower, LABEL_NAMES)  # kept with each pair, for the check before sending
    if not ((question and answer) or messages or body):
        found = ", ".join(map(str, columns))
        raise ImportProblem(
            f"{cut(source)}: cannot tell which columns hold the text (columns: {found}); "
            "expected question/answer (or instruction/response), messages, or title/body"
        )
    passages = []
    for i, row in enumerate(rows, start=1):
        where = f"{source}:row {i}"
        if question and answer:
            passage, why = _pair_of(row, question, answer, label, where)
        elif messages:
            passage, why = _exchange_of(row.get(messages), where)
        else:
            passage, why = _article_of(row, title, body, label, where)
        if passage is not None:
            passages.append(passage)
        elif skipped is not None:
            skipped.append(Skip("row", why, unit, numbers[i - 1] if numbers else i))
    return passages


def _first(lower: dict, names: tuple, exclude: str | None = None) -> str | None:
    return next((lower[n] for n in names if n in lower and lower[n] != exclude), None)


def _field(row: dict, column: str | None) -> str:
    value = row.get(column) if column else None
    return value.strip() if isinstance(value, str) else ""


def _missing(row: dict, column: str, name: str) -> str:
    """Why ``row`` has no text under ``column``: empty (or absent), or not text at all."""
    value = row.get(column)
    return f"empty {name}" if value is None or isinstance(value, str) else f"{name} is not text"


def _pair_of(row, question, answer, label, where) -> tuple[Passage | None, str]:
    text = _field(row, answer)
    if not text:
        return None, _missing(row, answer, "answer")
    asked = _field(row, question)
    return Passage(
        asked[:120] or text[:80], text, where, "past_answer", asked, _field(row, label)
    ), ""


def _article_of(row, title, body, label, where) -> tuple[Passage | None, str]:
    text = _field(row, body)
    if not text:
        return None, _missing(row, body, "body")
    return Passage(_field(row, title) or text[:80], text, where, intent=_field(row, label)), ""


def _exchange_of(messages, where) -> tuple[Passage | None, str]:
    """The pair of a ``messages`` list: its last user turn and the assistant answer after it."""
    if not isinstance(messages, list):
        return None, "messages is not a list"
    turns = [
        (m.get("role"), _content_text(m.get("content"))) for m in messages if isinstance(m, dict)
    ]
    turns = [(role, text) for role, text in turns if text is not None]
    for i in range(len(turns) - 1, 0, -1):
        if turns[i][0] == "assistant" and turns[i - 1][0] == "user":
            asked, text = turns[i - 1][1].strip(), turns[i][1].strip()
            if not text:
                return None, "empty answer"
            return Passage(asked[:120] or text[:80], text, where, "past_answer", asked), ""
    return None, "no user message answered by the assistant"


def _content_text(content) -> str | None:
    """A message's text: a string, or OpenAI's content parts (their ``text`` parts joined);
    None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return None
