"""Guards run on a dataset file before any parser sees its bytes.

Each refuses with a :class:`DataError` naming the file and what was expected: empty, too big,
binary, not UTF-8 (UTF-16 named as such), a line over ``MAX_ROW_BYTES``, JSON that would crash
pyarrow's reader (nested deeper than ``MAX_JSON_DEPTH``, a ``null`` row), or a Parquet file
without its markers or that unpacks past the size limit. One streaming pass for text; JSON lines
with few brackets cost one ``bytes.count`` more.
"""

from __future__ import annotations

import codecs
from pathlib import Path

MAX_ROW_BYTES = 8 << 20  # one line of a JSONL/CSV file; customer-support rows are a few KB
# JSON nesting: support rows are 2-4 levels deep. pyarrow's JSON reader recurses per level and
# crashes the whole process (SIGSEGV) somewhere past ~10,000 levels; refuse long before that.
MAX_JSON_DEPTH = 64
_CHUNK = 1 << 20


class DataError(ValueError):
    """A dataset could not be used; the message names the file and what was expected."""


def check_file(p: Path, max_bytes: int) -> None:
    _check_size(p, max_bytes)
    if p.suffix.lower() == ".parquet":
        _check_parquet(p, max_bytes)
        return
    _check_text(p, check_lines=p.suffix.lower() != ".json")
    if p.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        _check_json(p)


def check_text_file(p: Path, max_bytes: int) -> None:
    """Size, binary and encoding guards without the per-line limit.

    For files TuneDesk parses itself line by line (helpdesk exports,
    ``finetune.data.helpdesk``): there one oversized message skips its conversation, with a
    sentence, instead of refusing the whole file.
    """
    _check_size(p, max_bytes)
    _check_text(p, check_lines=False)


def _check_size(p: Path, max_bytes: int) -> None:
    size = p.stat().st_size
    if size == 0:
        raise DataError(f"{p.name}: the file is empty; expected rows of data")
    if size > max_bytes:
        raise DataError(
            f"{p.name}: {size_text(size)} is over the limit of {size_text(max_bytes)} "
            "for one dataset file (set TUNEDESK_MAX_DATA_BYTES to raise it)"
        )


def size_text(n: int) -> str:
    """A byte count as people read it: ``1 GiB``, ``2.5 MiB``, ``100 bytes``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def _check_parquet(p: Path, max_bytes: int) -> None:
    """PAR1 markers, and an uncompressed size within the limit (a compression bomb is refused)."""
    with open(p, "rb") as fh:
        head = fh.read(4)
        fh.seek(max(p.stat().st_size - 4, 0))  # a file under 4 bytes must not make seek fail
        tail = fh.read(4)
    if head != b"PAR1" or tail != b"PAR1":
        raise DataError(f"{p.name}: not a Parquet file (no PAR1 marker)")
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(p).metadata
    except Exception as err:
        raise DataError(f"{p.name}: not a readable Parquet file ({root_message(err)})") from err
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > max_bytes:
        raise DataError(
            f"{p.name}: unpacks to {size_text(unpacked)}, over the limit of "
            f"{size_text(max_bytes)} for one dataset file (set TUNEDESK_MAX_DATA_BYTES to raise it)"
        )


def _check_json(p: Path) -> None:
    """JSON that pyarrow's reader would crash on (SIGSEGV, taking the app with it) is refused.

    Two shapes crash pyarrow 26: nesting thousands of levels deep, and a ``null`` where a
    row should start. A top-level array (datasets parses it with ujson, then hands its items
    to pyarrow one per line) is parsed here and its items checked; JSON lines are checked
    line by line, and only bracket-heavy lines are parsed (a line can only be deeper than
    ``MAX_JSON_DEPTH`` if it holds that many brackets). A string cannot hold a raw newline in
    valid JSON, so lines never split a value's text.
    """
    with open(p, "rb") as fh:
        if fh.read(_CHUNK).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"["):
            fh.seek(0)
            _check_json_array(p, fh.read())
            return
        fh.seek(0)
        line_no = 0
        while line := fh.readline(MAX_ROW_BYTES + 1):
            line_no += 1
            if len(line) > MAX_ROW_BYTES:  # only .json files get here (no line limit)
                raise DataError(
                    f"{p.name}: line {line_no} holds one JSON value over "
                    f"{MAX_ROW_BYTES >> 20} MB; expected JSON lines or an array of rows"
                )
            if line.removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"null"):
                raise DataError(
                    f"{p.name}: line {line_no} is null; expected one JSON object per line"
                )
            if line.count(b"[") + line.count(b"{") > MAX_JSON_DEPTH and _too_deep(line):
                raise DataError(
                    f"{p.name}: line {line_no} is nested more than {MAX_JSON_DEPTH} levels deep; "
                    "expected rows of text fields"
                )


def _check_json_array(p: Path, data: bytes) -> None:
    """A top-level array must hold rows: all objects, or all strings (one text per row)."""
    try:
        items = _loads(data)
    except RecursionError:
        raise DataError(
            f"{p.name}: nested more than {MAX_JSON_DEPTH} levels deep; expected rows of text fields"
        ) from None
    except ValueError:
        return  # not valid JSON: the parser says where
    kinds = {type(item) for item in items}
    if not (kinds <= {dict} or kinds <= {str}):
        bad = next(
            (i for i, item in enumerate(items, 1) if not isinstance(item, (dict, str))), None
        )
        if (
            bad is None
        ):  # objects and strings mixed: which kind the array is meant to hold is unclear
            first_str = next(i for i, item in enumerate(items, 1) if isinstance(item, str))
            first_obj = next(i for i, item in enumerate(items, 1) if isinstance(item, dict))
            raise DataError(
                f"{p.name}: the top-level array mixes objects (item {first_obj}) and "
                f"strings (item {first_str}); expected all objects or all strings"
            )
        shown = "null" if items[bad - 1] is None else type(items[bad - 1]).__name__
        raise DataError(
            f"{p.name}: item {bad} of the top-level array is {shown}; "
            "expected an array of objects, one per row"
        )
    if any(_depth(item) > MAX_JSON_DEPTH for item in items):
        raise DataError(
            f"{p.name}: a row is nested more than {MAX_JSON_DEPTH} levels deep; "
            "expected rows of text fields"
        )


def _too_deep(line: bytes) -> bool:
    try:
        return _depth(_loads(line)) > MAX_JSON_DEPTH
    except RecursionError:
        return True
    except ValueError:
        return False  # not one JSON value per line (a pretty-printed file): the parser decides


def _loads(data: bytes):
    import json

    return json.loads(data.removeprefix(codecs.BOM_UTF8), strict=False)


def _depth(value) -> int:
    """How deeply lists and objects nest in a parsed JSON value (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend(
                (x, level + 1) for x in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _check_text(p: Path, check_lines: bool) -> None:
    """One streaming pass: no NUL bytes, valid UTF-8, no line over ``MAX_ROW_BYTES``."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line_no, run = 1, 0  # run: bytes since the last newline
    with open(p, "rb") as fh:
        head = fh.read(4)
        fh.seek(0)
        for bom, name in (
            (codecs.BOM_UTF32_LE, "UTF-32"),
            (codecs.BOM_UTF32_BE, "UTF-32"),
            (codecs.BOM_UTF16_LE, "UTF-16"),
            (codecs.BOM_UTF16_BE, "UTF-16"),
        ):
            if head.startswith(bom):
                raise DataError(f"{p.name}: the text is {name}-encoded; save the file as UTF-8")
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            nul = chunk.find(b"\0")
            if nul >= 0:
                line = line_no + chunk.count(b"\n", 0, nul)
                raise DataError(
                    f"{p.name}: binary content (NUL byte on line {line}); "
                    "expected a UTF-8 text file"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                line = line_no + chunk.count(b"\n", 0, err.start)
                raise DataError(
                    f"{p.name}: not valid UTF-8 text (byte 0x{chunk[err.start]:02x} on "
                    f"line {line}); save the file as UTF-8"
                ) from None
            first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
            # Chunks are smaller than the limit, so only the line spanning chunks can exceed it.
            run = run + len(chunk) if first < 0 else run + first
            if check_lines and run > MAX_ROW_BYTES:
                raise DataError(
                    f"{p.name}: line {line_no} is over {MAX_ROW_BYTES >> 20} MB; "
                    "one row may hold at most that much text"
                )
            if first >= 0:
                line_no += chunk.count(b"\n")
                run = len(chunk) - last - 1
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DataError(f"{p.name}: not valid UTF-8 text (cut-off character at the end)") from None


def root_message(err: BaseException) -> str:
    """The innermost explicit cause's message, on one line: that is the one that names the row.

    Implicit contexts are not followed past the first step: datasets retries a failed JSON
    parse another way, and that retry's error ("Trailing data") hides the useful one.
    """
    seen = err
    if seen.__cause__ is None and seen.__context__ is not None and not seen.__suppress_context__:
        seen = seen.__context__
    while seen.__cause__ is not None:
        seen = seen.__cause__
    text = " ".join(str(seen).split()) or type(seen).__name__
    return text[:300]
