"""Where user data lives: one home folder, ``$TUNEDESK_HOME`` (default ``./outputs``).

Every read or write of user data goes through :func:`home` and :func:`safe_name`, so nothing
lands outside the home folder and names typed in the UI can never climb out of it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

from core.user_text import quote

SUBFOLDERS = ("models", "runs", "adapters", "evals", "datasets", "feedback", "exports", "knowledge")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def home(create: bool = True) -> Path:
    """Return the TuneDesk home folder, creating it and its subfolders when asked."""
    root = Path(os.environ.get("TUNEDESK_HOME", "outputs")).expanduser().resolve()
    if create:
        for sub in SUBFOLDERS:
            (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def subdir(kind: str) -> Path:
    """Return ``home()/kind`` for one of :data:`SUBFOLDERS`."""
    if kind not in SUBFOLDERS:
        raise ValueError(f"unknown home subfolder {kind!r}; expected one of {SUBFOLDERS}")
    return home() / kind


def safe_name(name: str, what: str = "name") -> str:
    """Validate a user-chosen name (adapter, run, model cache entry).

    Allowed: letters, digits, ``.``, ``_``, ``-``; 1-64 characters; must start with a letter
    or digit. That rules out path separators, ``..``, absolute paths and hidden files.

    Raises:
        ValueError: naming the bad value and the rule it broke.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise ValueError(
            f"invalid {what} {quote(name)}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/', '\\' or '..')"
        )
    return name


def inside(base: Path, candidate: Path) -> Path:
    """Resolve ``candidate`` and make sure it stays inside ``base`` (symlinks followed)."""
    resolved = candidate.resolve()
    if not resolved.is_relative_to(base.resolve()):
        raise ValueError(f"{candidate} points outside {base}; refused")
    return resolved


def readable(typed: str, what: str = "the path") -> Path:
    """A path a user typed into a page, to read from: any path on localhost; when the app
    serves users off localhost (:func:`core.hosts.exposed`), only one under the home folder
    or the project's own ``assets/`` (symlinks followed), so a page cannot read the server's
    files.

    Raises:
        ValueError: a path outside those folders, said without the server's own paths.
    """
    from core.hosts import exposed

    path = Path(typed).expanduser()
    if not exposed():
        return path
    resolved = path.resolve()
    allowed = (home(), Path(__file__).resolve().parents[1] / "assets")
    if any(resolved.is_relative_to(base.resolve()) for base in allowed):
        return path
    raise ValueError(
        f"{what} must be a file under the home folder when the app is used off "
        "localhost; upload the file instead"
    )


@contextmanager
def atomic_dir(target: Path):
    """Yield a temporary folder beside ``target``; rename it to ``target`` on success.

    A crash or exception leaves no half-written ``target``: the temp folder is removed
    (or, after SIGKILL, left as a hidden ``.tmp-*`` folder that listings ignore).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            raise FileExistsError(f"{target} already exists")
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_writable(folder: Path) -> None:
    """Fail early, in words, when the home folder cannot take writes (read-only, disk full)."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"x" * 4096)
    except OSError as err:
        raise OSError(
            f"cannot write to {folder}: {err.strerror or err}. Free disk space or fix permissions."
        ) from err
    finally:
        with suppress(
            OSError
        ):  # on a read-only file system even this fails: keep the message above
            probe.unlink(missing_ok=True)
    free = shutil.disk_usage(folder).free
    if free < 200 * 2**20:
        raise OSError(
            f"only {free / 2**20:.0f} MiB free under {folder}; TuneDesk needs at least 200 MiB "
            "to save safely"
        )


def read_json_lines(path) -> list[dict]:
    """The JSON objects of a JSON-lines file written by :func:`append_line`, oldest first; a
    torn or foreign line is skipped; a missing file is no rows."""
    import json

    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def append_line(path, line: str) -> None:
    """Append one line whole, or nothing: a full disk must not leave half a row behind.

    A torn last line would glue onto the next row and make the whole file unreadable as JSONL.
    """
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
