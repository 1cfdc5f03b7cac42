"""The Train and Evaluate tabs' data files: an upload kept in the home (checked first), and the
preview of a dataset's first rows (training rows, or preference pairs). No gradio here."""

from __future__ import annotations

import os
from pathlib import Path

from core import paths

UPLOAD_TYPES = (".jsonl", ".json", ".csv", ".parquet")
MAX_UPLOAD_BYTES = 200 * 2**20
# The columns of preference pairs (the Review tab's export), which DPO / CPO / ORPO train on
PAIR_COLUMNS = ("prompt", "chosen", "rejected")


def typed_path(text: str | None) -> str:
    """A path typed into a tab, trimmed, and without the quotes a file manager's "Copy as path"
    puts around it: 'x.jsonl' or "x.jsonl" names x.jsonl where that exists and the quoted name
    does not (the loader said '"x.jsonl" does not exist')."""
    text = (text or "").strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        bare = text[1:-1].strip()
        if not Path(text).expanduser().exists() and Path(bare).expanduser().exists():
            return bare
    return text


def store_upload(temp_path: str) -> str:
    """Validate an uploaded dataset and keep a copy under ``datasets/uploads``.

    Raises:
        ValueError: wrong type, too big, or unreadable (the loader's message names why).
        OSError: the home folder cannot take the copy (read-only, full); nothing is left behind.
    """
    from core.hashing import file_hash
    from finetune.config import DataArgs
    from finetune.train.preflight import dataset_problems, pairs_problems

    src = Path(temp_path)
    if src.suffix.lower() not in UPLOAD_TYPES:
        raise ValueError(f"{src.name}: upload a {', '.join(UPLOAD_TYPES)} file")
    if src.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(
            f"{src.name} is {src.stat().st_size / 2**20:.0f} MiB; the upload limit is 200 MiB"
        )
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in src.stem)[:40] or "upload"
    name = f"{stem}-{file_hash(src)[:10]}{src.suffix.lower()}"
    # The checks a run makes (readable, known columns, no broken field), before a copy is
    # kept: a refused upload leaves nothing under datasets/uploads (nor an older copy of it).
    problems = dataset_problems(DataArgs(path=str(src)))
    if problems and holds_pairs(src):  # preference pairs: checked as a DPO / ORPO run reads them
        problems = pairs_problems(src)
    if problems:
        (paths.home(create=False) / "datasets" / "uploads" / name).unlink(missing_ok=True)
        raise ValueError(problems[0])
    dest = paths.subdir("datasets") / "uploads" / name
    if not dest.exists():
        try:
            _copy_whole(src, dest)
        except OSError as err:
            raise OSError(
                f"could not keep a copy of {src.name} in {dest.parent}: {err.strerror or err}"
            ) from err
    return str(dest)


def by_upload_name(text: str, uploads) -> str:
    """``text`` with each upload's temporary path (whole, or shortened as messages shorten a
    path) replaced by the file's own name: Gradio keeps an upload as <temp dir>/<hash>/<its
    name>, a path the user never gave."""
    from core.user_text import cut

    for u in map(Path, uploads):
        for spelled in (str(u), cut(str(u))):
            text = text.replace(spelled, cut(u.name))
    return text


def holds_pairs(path: Path) -> bool:
    """Whether the data file at ``path`` has the columns of preference pairs."""
    from finetune.data.load import load_rows

    try:
        return set(PAIR_COLUMNS) <= set(load_rows(path).column_names)
    except (ValueError, OSError):
        return False


def _copy_whole(src: Path, dest: Path) -> None:
    """Copy beside ``dest`` and rename: a full disk leaves no truncated file that a later
    upload of the same bytes would find and trust."""
    import shutil
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".upload-", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def preview(path: str, rows: int = 5) -> tuple[list[list[str]], list[str], str]:
    """First rows, their columns, and the detected column mapping (or, for preference pairs,
    what trains on them), for the Train tab.

    Raises:
        ValueError: unreadable data, unknown columns, or pairs a preference run cannot read.
    """
    from finetune.config import DataArgs
    from finetune.data.load import load_rows
    from finetune.data.rows import detect_mapping

    table = load_rows(path)
    if set(PAIR_COLUMNS) <= set(table.column_names):
        return _pairs_preview(path, rows)
    mapping = detect_mapping(table.column_names, DataArgs(path=path))
    head = table.select(range(min(rows, len(table))))
    cols = table.column_names
    values = [[str(r[c])[:200] for c in cols] for r in head]
    return values, cols, f"{len(table):,} rows · detected mapping: {mapping.describe()}"


def _pairs_preview(path: str, rows: int) -> tuple[list[list[str]], list[str], str]:
    """Preference pairs read as a preference run reads them (prompt = its last user turn)."""
    from finetune.train.preference import read_pairs

    pairs = read_pairs(path)  # the checks Check makes for DPO / CPO / ORPO
    values = [
        [
            next((m["content"] for m in reversed(p["prompt"]) if m["role"] == "user"), "")[:200],
            p["chosen"][:200],
            p["rejected"][:200],
        ]
        for p in pairs[:rows]
    ]
    info = (
        f"{len(pairs):,} preference pair{'' if len(pairs) == 1 else 's'} (prompt, chosen, "
        "rejected): Method DPO, CPO or ORPO "
        "(under Advanced) trains on them, starting from an adapter on the shelf; SFT needs "
        "prompt/response rows"
    )
    return values, list(PAIR_COLUMNS), info
