"""Files become passages: Markdown, HTML, plain text, CSV and the training data's JSONL.

- Markdown: one passage per heading (``#`` to ``######``) with its body; text before the
  first heading is a passage titled by the file name. A line ``<!-- intent: NAME -->`` in a
  section labels its article with the intent it answers (the line itself is not kept).
- HTML: tags stripped with the standard library's parser (scripts and styles dropped), the
  title from ``<title>``, else the first ``<h1>``; one passage per page.
- Plain text: one passage per file, titled by its first line.
- CSV and JSONL: one passage per row. ``question``/``answer`` columns (or any pair the
  training data's column names allow, such as Bitext's ``instruction``/``response``) make
  past answers; ``title``/``body`` (or ``text``) make articles, labelled by an ``intent``
  column where there is one. A JSONL row may instead hold
  a ``messages`` list: its last user turn and the assistant's answer are the pair.

Bad input is one sentence (:class:`ImportProblem`): a file that is not text, an empty file,
a table whose columns say neither questions and answers nor titles and bodies.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from core.columns import MESSAGES_NAMES, PROMPT_NAMES, RESPONSE_NAMES
from core.user_text import cut
from knowledge.passages import Passage, check

FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".text": "text",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
}
TITLE_NAMES = ("title", "name", "subject", "heading")
BODY_NAMES = ("body", "text", "content", "article", "macro")
LABEL_NAMES = ("intent", "category", "tag", "label")  # as the release checks look for one
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_INTENT_MARK = re.compile(r"^\s*<!--\s*intent\s*:\s*(\S+?)\s*-->\s*$", re.IGNORECASE)


class ImportProblem(ValueError):
    """A file that cannot become passages, said in one sentence."""


def read_passages(path: str | Path, kind: str | None = None) -> list[Passage]:
    """The passages of one file, by its extension.

    Args:
        path: a ``.md``, ``.html``, ``.txt``, ``.csv`` or ``.jsonl`` file.
        kind: every passage's kind; None: ``past_answer`` for question/answer rows,
            ``article`` otherwise.

    Raises:
        ImportProblem: an unknown extension, a binary or empty file, an unknown column layout.
    """
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImportProblem(
            f"{cut(path.name)}: unknown file type {path.suffix or '(none)'!r}; "
            f"import one of {', '.join(sorted(FORMATS))}"
        )
    text = _text_of(path)
    reader = {
        "markdown": markdown_passages,
        "html": html_passages,
        "text": text_passages,
        "csv": csv_passages,
        "jsonl": jsonl_passages,
    }[fmt]
    passages = reader(text, path.name)
    if not passages:
        raise ImportProblem(f"{cut(path.name)} holds no passage with text")
    if kind:
        passages = [
            Passage(p.title, p.text, p.source, kind, p.question, p.intent) for p in passages
        ]
    return [check(p) for p in passages]


def _text_of(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImportProblem(f"{cut(str(path))} does not exist") from None
    except IsADirectoryError:
        raise ImportProblem(f"{cut(str(path))} is a folder; name the files in it") from None
    if b"\x00" in data[:8192]:
        raise ImportProblem(
            f"{cut(path.name)} is not text (a binary file); export it as Markdown, "
            "HTML, plain text, CSV or JSONL"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ImportProblem(
            f"{cut(path.name)} is not UTF-8 text (byte {err.start:,}); "
            "save it as UTF-8 and import it again"
        ) from None
    if not text.strip():
        raise ImportProblem(f"{cut(path.name)} is empty")
    return text


def markdown_passages(text: str, source: str) -> list[Passage]:
    """One passage per heading; the heading is the title (outside fenced code)."""
    passages, title, body, fenced = [], Path(source).stem, [], False
    for line in text.splitlines():
        fenced ^= line.lstrip().startswith("```")
        match = None if fenced else _HEADING.match(line)
        if match:
            _add(passages, title, body, source)
            title, body = match.group(2), []
        else:
            body.append(line)
    _add(passages, title, body, source)
    return passages


def _add(passages: list, title: str, body: list[str], source: str) -> None:
    marks = [m.group(1) for m in map(_INTENT_MARK.match, body) if m]
    text = "\n".join(line for line in body if not _INTENT_MARK.match(line)).strip()
    if text:
        intent = marks[-1] if marks else ""
        passages.append(Passage(title, text, f"{source}#{title}", intent=intent))


class _TextOfPage(HTMLParser):
    SKIP = {"script", "style", "noscript", "template"}
    BLOCKS = {
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "section",
        "article",
    }

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.title, self.h1, self._in = [], "", "", []

    def handle_starttag(self, tag, attrs):
        self._in.append(tag)
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self._in:  # unclosed tags inside are closed with it
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag) :]
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if any(t in self.SKIP for t in self._in):
            return
        if "title" in self._in:
            self.title += data
        elif "h1" in self._in and not self.h1:
            self.h1 = data
            self.parts.append(data)
        else:
            self.parts.append(data)


def html_passages(text: str, source: str) -> list[Passage]:
    """The page's visible text as one passage, titled by ``<title>`` or its first ``<h1>``."""
    page = _TextOfPage()
    page.feed(text)
    page.close()
    lines = [" ".join(line.split()) for line in "".join(page.parts).splitlines()]
    body = "\n".join(line for line in lines if line)
    title = " ".join((page.title or page.h1).split()) or Path(source).stem
    return [Passage(title, body, source)] if body else []


def text_passages(text: str, source: str) -> list[Passage]:
    """The whole file as one passage, titled by its first non-empty line."""
    first = next(line.strip() for line in text.splitlines() if line.strip())
    return [Passage(first[:120], text.strip(), source)]


def csv_passages(text: str, source: str) -> list[Passage]:
    """One passage per row of a CSV with a header."""
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as err:
        raise ImportProblem(f"{cut(source)} is not a readable CSV ({err})") from None
    if not rows:
        raise ImportProblem(f"{cut(source)} has a header but no rows")
    return table_passages(rows, list(rows[0]), source)


def jsonl_passages(text: str, source: str) -> list[Passage]:
    """One passage per JSON object, one object a line (or one JSON list of objects)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
        except ValueError as err:
            raise ImportProblem(f"{cut(source)} is not a JSON list ({err})") from None
        rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ImportProblem(
                    f"{cut(source)}: line {number} is not JSON ({err.msg}, column {err.colno}); "
                    "expected one JSON object per line"
                ) from None
            if not isinstance(row, dict):
                raise ImportProblem(
                    f"{cut(source)}: line {number} is a JSON {type(row).__name__}, not an "
                    "object; expected one JSON object per line"
                )
            rows.append(row)
    if not rows:
        raise ImportProblem(f"{cut(source)} holds no JSON object")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return table_passages(rows, columns, source)


def table_passages(rows: list[dict], columns: list[str], source: str) -> list[Passage]:
    """Rows of a table as passages, by the column layout they show.

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
            passages.append(
                _pair(_field(row, question), _field(row, answer), where, _field(row, label))
            )
        elif messages:
            passages.append(_pair(*_last_exchange(row.get(messages)), where))
        else:
            text = _field(row, body)
            passages.append(
                Passage(_field(row, title) or text[:80], text, where, intent=_field(row, label))
            )
    return [p for p in passages if p is not None and p.text.strip()]


def _first(lower: dict, names: tuple, exclude: str | None = None) -> str | None:
    return next((lower[n] for n in names if n in lower and lower[n] != exclude), None)


def _field(row: dict, column: str | None) -> str:
    value = row.get(column) if column else None
    return value.strip() if isinstance(value, str) else ""


def _pair(question: str, answer: str, source: str, intent: str = "") -> Passage | None:
    if not answer:
        return None
    return Passage(question[:120] or answer[:80], answer, source, "past_answer", question, intent)


def _last_exchange(messages) -> tuple[str, str]:
    """The last user turn and the assistant answer after it, from a list of messages."""
    if not isinstance(messages, list):
        return "", ""
    turns = [
        (m.get("role"), _content_text(m.get("content"))) for m in messages if isinstance(m, dict)
    ]
    turns = [(role, text) for role, text in turns if text is not None]
    for i in range(len(turns) - 1, 0, -1):
        if turns[i][0] == "assistant" and turns[i - 1][0] == "user":
            return turns[i - 1][1].strip(), turns[i][1].strip()
    return "", ""


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
