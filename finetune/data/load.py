"""Reading a dataset file into a ``datasets.Dataset``, with guards in front of the library.

Supported: ``.jsonl``/``.ndjson``/``.json``, ``.csv``/``.tsv``, ``.parquet``, a folder written by
``save_to_disk``, a folder of data files of one format, and a Hub dataset id (online only).

Every problem becomes a :class:`DataError` (a ``ValueError``) that names the file and says what
was expected. The guards run before ``datasets`` sees the bytes because its errors come from
deep inside pyarrow/pandas and rarely name the row; a binary or 100 MB single-line file is
refused after one streaming pass instead of being handed to a parser (the guards live in
:mod:`finetune.data.checks`).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from core.user_text import check_unicode, cut, quote
from finetune.data.checks import (  # noqa: F401  (DataError, MAX_ROW_BYTES re-exported)
    MAX_ROW_BYTES,
    DataError,
    check_file,
    root_message,
)

MAX_FILE_BYTES = 1 << 30  # default refusal size for one file; override with TUNEDESK_MAX_DATA_BYTES
FORMATS = {
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_CHUNK = 1 << 20


def _keep_progress_lock() -> None:
    """Give tqdm its class-wide lock for the life of the process.

    ``datasets`` reads files through tqdm's ``thread_map``, whose ``ensure_lock`` deletes the
    lock on exit when it had to create it. Two dataset loads at once (the Train tab's Check
    beside a preview or an evaluation) then raced: one load's bars closed after the other had
    deleted the lock, and the read failed with "type object 'tqdm' has no attribute '_lock'".
    A lock that exists before any load is never deleted.
    """
    from tqdm import tqdm

    tqdm.get_lock()


_keep_progress_lock()


def load_rows(path: str | Path, max_bytes: int | None = None):
    """Load every row of a dataset file, folder or Hub id, untouched.

    Args:
        path: a data file, a ``save_to_disk`` folder, a folder of data files, or a Hub id.
        max_bytes: refuse files larger than this (default ``MAX_FILE_BYTES`` or the
            ``TUNEDESK_MAX_DATA_BYTES`` environment variable).

    Returns:
        A ``datasets.Dataset`` with at least one row and one column.

    Raises:
        DataError: the path is missing, empty, binary, too big, not valid UTF-8, an
            unsupported format, or the parser rejected it (its reason is quoted).
    """
    if max_bytes is None:
        max_bytes = max_data_bytes()
    p = checked_path(str(path))
    if p.is_dir():
        ds = _load_folder(p, max_bytes)
    elif p.is_file():
        ds = _load_file(p, max_bytes)
    elif _HUB_ID.match(str(path)) and p.suffix.lower() not in FORMATS:
        ds = _load_hub(str(path))
    else:
        raise DataError(
            f"dataset file {cut(str(path))} does not exist (expected a {_kinds()} file, "
            "a dataset folder, or a Hub dataset id 'org/name')"
        )
    if not ds.column_names:
        raise DataError(f"{p.name}: no columns found; expected a table of rows")
    if ds.num_rows == 0:
        raise DataError(f"{p.name}: has no rows (only a header, blank lines or empty records)")
    return ds


def max_data_bytes() -> int:
    """The size limit for one data file: ``TUNEDESK_MAX_DATA_BYTES`` or ``MAX_FILE_BYTES``."""
    limit = os.environ.get("TUNEDESK_MAX_DATA_BYTES", str(MAX_FILE_BYTES))
    if not limit.isdigit():
        raise DataError(f"TUNEDESK_MAX_DATA_BYTES must be a number of bytes (got {limit!r})")
    return int(limit)


def content_hash(path: str | Path, ds=None) -> str:
    """sha256 over the bytes of the data file(s) behind ``path`` (Hub: the loaded fingerprint)."""
    import hashlib

    p = Path(str(path)).expanduser()
    h = hashlib.sha256()
    if p.is_file() or p.is_dir():
        files = [p] if p.is_file() else _data_files(p)
        for f in files:
            h.update(f.name.encode() if p.is_dir() else b"")
            with open(f, "rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(_CHUNK), b""):
                    h.update(chunk)
    else:  # Hub id: the datasets fingerprint follows the revision that was downloaded
        h.update(f"hub:{path}:{getattr(ds, '_fingerprint', '')}".encode())
    return h.hexdigest()


def _kinds() -> str:
    return "/".join(sorted(e.lstrip(".") for e in FORMATS))


def _data_files(folder: Path) -> list[Path]:
    """The files that hold a folder's rows (arrow files of a saved dataset, else data files)."""
    arrow = sorted(folder.rglob("*.arrow"))
    if arrow:
        return arrow
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in FORMATS)


def _load_folder(folder: Path, max_bytes: int):
    from datasets import DatasetDict, load_from_disk

    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        try:
            ds = load_from_disk(str(folder))
        except Exception as err:
            raise DataError(
                f"{folder}: not a readable saved dataset ({root_message(err)})"
            ) from err
        if isinstance(ds, DatasetDict):
            # We make our own train/validation split, so only one split is read.
            name = "train" if "train" in ds else next(iter(ds), None)
            if name is None:
                raise DataError(f"{folder}: the saved dataset has no splits")
            ds = ds[name]
        return ds
    files = _data_files(folder)
    # .csv and .tsv share a parser but not a separator, so they count as two formats here.
    kinds = {"tsv" if f.suffix.lower() == ".tsv" else FORMATS[f.suffix.lower()] for f in files}
    if not files or len(kinds) != 1:
        raise DataError(
            f"{folder}: expected a save_to_disk folder or data files of one format "
            f"({_kinds()}); found {len(files)} data file(s) of {len(kinds)} format(s)"
        )
    for f in files:
        check_file(f, max_bytes)
    if FORMATS[files[0].suffix.lower()] == "csv":
        _check_same_columns(folder, files)
    return _parse([str(f) for f in files], files[0], FORMATS[files[0].suffix.lower()])


def _check_same_columns(folder: Path, files: list[Path]) -> None:
    """Refuse a folder whose CSV / TSV files differ in their columns: every file is read with
    the first one's, and datasets' error for another named neither file."""
    first = _csv_header(files[0])
    for f in files[1:]:
        if set(header := _csv_header(f)) != set(first):
            raise DataError(
                f"{folder.name}: its files have different columns ({files[0].name}: "
                f"{', '.join(first)}; {f.name}: {', '.join(header)}); give a folder of files "
                "with the same columns, or each file on its own"
            )


def _load_file(p: Path, max_bytes: int):
    kind = FORMATS.get(p.suffix.lower())
    if kind is None:
        raise DataError(
            f"{p.name}: unsupported file type {p.suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(FORMATS)}"
        )
    check_file(p, max_bytes)
    return _parse([str(p)], p, kind)


def _load_hub(name: str):
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        raise DataError(
            f"{name} is not a local file or folder, and loading it as a Hugging Face "
            "Hub dataset needs the network, but HF_HUB_OFFLINE is set; "
            "download it first or give a local file"
        )
    from datasets import load_dataset

    with quiet():
        try:
            return load_dataset(name, split="train")
        except Exception as err:
            raise DataError(
                f"could not load Hub dataset {quote(name)}: {root_message(err)}"
            ) from err


def _parse(files: list[str], first: Path, kind: str):
    from datasets import load_dataset

    kwargs: dict = {}
    if kind == "csv":
        kwargs = _csv_kwargs(first)
    elif kind == "json":
        # datasets 5 re-shapes files that look like agent traces; we want rows as written.
        kwargs = {"parse_agent_traces": False}
    with quiet():
        try:
            return load_dataset(kind, data_files=files, split="train", **kwargs)
        except Exception as err:
            if "corresponds to no data" in str(err):  # datasets' words for "zero rows parsed"
                raise DataError(
                    f"{first.name}: has no rows (only a header, blank lines or empty records)"
                ) from None
            bad = _first_bad_json_line(files) if kind == "json" else None
            raise DataError(
                f"{bad[0]}: could not read it as JSON: line {bad[1]}: {bad[2]}"
                if bad
                else f"{first.name}: could not read it as {kind.upper()}: {root_message(err)}"
            ) from err


def _first_bad_json_line(files: list[str]) -> tuple[str, int, str] | None:
    """``(file name, line number from 1, what is wrong)`` of the first line of a JSON-lines
    file that is not a JSON object (None: every line of every file is one, or a file is one
    JSON document, which the loader's own words describe better)."""
    import json

    for name in files:
        path = Path(name)
        try:
            with path.open(encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError as err:
                        if n == 1 and line.lstrip().startswith("["):
                            return None  # one JSON document across lines, not JSON lines
                        return path.name, n, getattr(err, "msg", str(err))
                    if not isinstance(row, dict):
                        return path.name, n, f"a JSON {type(row).__name__}, not an object"
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _csv_kwargs(p: Path) -> dict:
    """Read every CSV cell as text: no type guessing, no "NA" -> missing, same types per chunk."""
    from datasets import Features, Value

    sep = "\t" if p.suffix.lower() == ".tsv" else ","
    features = Features({n: Value("string") for n in _csv_header(p)})
    return {"sep": sep, "features": features, "na_filter": False, "keep_default_na": False}


def _csv_header(p: Path) -> list[str]:
    """The column names on a CSV / TSV file's first line."""
    import pandas as pd

    sep = "\t" if p.suffix.lower() == ".tsv" else ","
    try:
        header = pd.read_csv(p, nrows=0, sep=sep, encoding="utf-8").columns
    except Exception as err:
        raise DataError(f"{p.name}: could not read the CSV header: {root_message(err)}") from err
    names = [str(c) for c in header]
    if not names:
        raise DataError(f"{p.name}: no header row; expected column names on the first line")
    return names


@contextlib.contextmanager
def quiet():
    """Silence datasets' logging and progress bars for a block.

    Its error log would print a second, less clear message before our DataError, and bars
    for a few seconds of in-memory work are noise in tests and CLI output alike.
    """
    import datasets

    level, bars_on = datasets.logging.get_verbosity(), datasets.is_progress_bar_enabled()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)
        if bars_on:
            datasets.enable_progress_bars()


def checked_path(path: str) -> Path:
    """A typed path, refused when it is not valid Unicode or too long for the file system
    (``stat`` would raise an error repeating all of it)."""
    check_unicode(path, "the dataset path")
    p = Path(path).expanduser()
    try:
        p.exists()
    except OSError as err:
        raise DataError(f"the dataset path {quote(path)} cannot be used: {err.strerror}") from None
    return p
