"""Files become passages: Markdown, HTML, plain text, CSV and the training data's JSONL.

- Markdown: one passage per heading (``#`` to ``######``) with its body; text before the
  first heading is a passage titled by the file name. A line ``<!-- intent: NAME -->`` in a
  section labels its article with the intent it answers (the line itself is not kept).
- HTML: tags stripped with the standard library's parser (scripts and styles dropped), the
  title from ``<title>``, else the first ``<h1>``; one passage per page.
- Plain text: one passage per file, titled by its first line.
- CSV and JSONL: one passage per row, by its columns (:mod:`knowledge.tables`).

Bad input is one sentence (:class:`ImportProblem`): a file that is not text, an empty file,
a table whose columns say neither questions and answers nor titles and bodies. Rows and
sections that give no passage (an empty answer, a heading with nothing under it) are left
out and counted with their lines (:func:`read_file`), so the import can say so.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from core.user_text import cut
from knowledge.import_report import FileRead, ImportProblem, Skip, counted
from knowledge.passages import Passage, check
from knowledge.tables import table_passages

__all__ = ["FileRead", "ImportProblem", "read_file", "read_passages", "table_passages"]

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
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_INTENT_MARK = re.compile(r"^\s*<!--\s*intent\s*:\s*(\S+?)\s*-->\s*$", re.IGNORECASE)


def read_passages(path: str | Path, kind: str | None = None) -> list[Passage]:
    """The passages of one file, by its extension (:func:`read_file`'s, without the count of
    what it left out)."""
    return read_file(path, kind).passages


def read_file(path: str | Path, kind: str | None = None) -> FileRead:
    """The passages of one file, by its extension, and the rows or sections it left out.

    Args:
        path: a ``.md``, ``.html``, ``.txt``, ``.csv`` or ``.jsonl`` file.
        kind: every passage's kind; None: ``past_answer`` for question/answer rows,
            ``article`` otherwise.

    Raises:
        ImportProblem: an unknown extension, a binary or empty file, an unknown column layout,
            no passage with text (with what was left out and why).
    """
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImportProblem(
            f"{cut(path.name)}: unknown file type {path.suffix or '(none)'!r}; "
            f"import one of {', '.join(sorted(FORMATS))}"
        )
    text = _text_of(path)
    skipped: list[Skip] = []
    if fmt in ("html", "text"):  # one passage a file: nothing to count
        passages = {"html": html_passages, "text": text_passages}[fmt](text, path.name)
    else:
        reader = {"markdown": markdown_passages, "csv": csv_passages, "jsonl": jsonl_passages}
        passages = reader[fmt](text, path.name, skipped=skipped)
    if not passages:
        why = f": {counted(skipped)}" if skipped else ""
        raise ImportProblem(f"{cut(path.name)} holds no passage with text{why}")
    if kind:
        passages = [
            Passage(p.title, p.text, p.source, kind, p.question, p.intent) for p in passages
        ]
    return FileRead(path.name, [check(p) for p in passages], tuple(skipped))


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


def markdown_passages(
    text: str, source: str, *, skipped: list[Skip] | None = None
) -> list[Passage]:
    """One passage per heading; the heading is the title (outside fenced code).

    Args:
        skipped: where a heading with no text under it is added (not one heading the deeper
            sections after it, which is the page's structure).
    """
    sections = _sections(text, Path(source).stem)
    passages = []
    for i, (level, line, title, body) in enumerate(sections):
        passage = _section_passage(title, body, source)
        heads_deeper = i + 1 < len(sections) and sections[i + 1][0] > level
        if passage is not None:
            passages.append(passage)
        elif level and not heads_deeper and skipped is not None:
            skipped.append(Skip("section", "no text under the heading", "line", line, title))
    return passages


def _sections(text: str, stem: str) -> list[tuple[int, int, str, list[str]]]:
    """``(level, line, title, body lines)`` per heading; first the text before any heading
    (level 0, titled by the file's name)."""
    sections, fenced = [(0, 1, stem, [])], False
    for number, line in enumerate(text.splitlines(), start=1):
        fenced ^= line.lstrip().startswith("```")
        match = None if fenced else _HEADING.match(line)
        if match:
            sections.append((len(match.group(1)), number, match.group(2), []))
        else:
            sections[-1][3].append(line)
    return sections


def _section_passage(title: str, body: list[str], source: str) -> Passage | None:
    marks = [m.group(1) for m in map(_INTENT_MARK.match, body) if m]
    text = "\n".join(line for line in body if not _INTENT_MARK.match(line)).strip()
    if not text:
        return None
    return Passage(title, text, f"{source}#{title}", intent=marks[-1] if marks else "")


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


def csv_passages(text: str, source: str, *, skipped: list[Skip] | None = None) -> list[Passage]:
    """One passage per row of a CSV with a header (``skipped``: rows giving none, by line)."""
    rows, lines = _csv_rows(text, source)
    if not rows:
        raise ImportProblem(f"{cut(source)} has a header but no rows")
    return table_passages(rows, list(rows[0]), source, numbers=lines, unit="line", skipped=skipped)


def _csv_rows(text: str, source: str) -> tuple[list[dict], list[int]]:
    """The rows, and the line each begins on (a quoted field may hold line breaks)."""
    reader = csv.DictReader(io.StringIO(text))
    physical = text.split("\n")  # as StringIO splits lines, so as reader.line_num counts them
    rows, lines = [], []
    try:
        if not reader.fieldnames:  # reads the header
            return [], []
        end = reader.line_num
        for row in reader:
            start = end + 1
            while start < reader.line_num and not physical[start - 1].strip("\r"):
                start += 1  # blank lines between rows are no rows
            rows.append(row)
            lines.append(start)
            end = reader.line_num
    except csv.Error as err:
        raise ImportProblem(f"{cut(source)} is not a readable CSV ({err})") from None
    return rows, lines


def jsonl_passages(text: str, source: str, *, skipped: list[Skip] | None = None) -> list[Passage]:
    """One passage per JSON object, one object a line (or one JSON list of objects).

    Args:
        skipped: where rows giving no passage are added, by line (in a JSON list: by item,
            an item that is not an object among them).
    """
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError as err:
            raise ImportProblem(f"{cut(source)} is not a JSON list ({err})") from None
        items = items if isinstance(items, list) else []
        numbers = [n for n, item in enumerate(items, start=1) if isinstance(item, dict)]
        rows, unit = [items[n - 1] for n in numbers], "item"
        if skipped is not None:
            skipped += [
                Skip("row", "not a JSON object", unit, n)
                for n, item in enumerate(items, start=1)
                if not isinstance(item, dict)
            ]
    else:
        rows, numbers, unit = [], [], "line"
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                rows.append(_json_object(line, number, source))
                numbers.append(number)
    if not rows:
        raise ImportProblem(f"{cut(source)} holds no JSON object")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    found = table_passages(rows, columns, source, numbers=numbers, unit=unit, skipped=skipped)
    if skipped is not None:
        skipped.sort(key=lambda s: s.number)
    return found


def _json_object(line: str, number: int, source: str) -> dict:
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
    return row
