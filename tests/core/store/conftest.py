"""Running the store's two sides at once, and a throwaway PostgreSQL server."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian's, or on the PATH), None without."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of our own in a temporary folder, on a unix socket only; yields a
    function giving the URL of a new empty database. Skipped where PostgreSQL is not installed."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed "
            "(Debian: apt-get install postgresql; .ci/run installs it)"
        )
    pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')"
    )
    import psycopg

    as_user = (
        ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    )  # initdb refuses root
    root = Path(tempfile.mkdtemp(prefix="tunedesk-pg-"))
    if as_user:
        shutil.chown(root, "postgres")
    data, log = root / "data", root / "log.txt"
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-c listen_addresses='' -k {root} -p 5432 -c fsync=off"
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    base = f"postgresql://postgres@/{{}}?host={root}&port=5432"
    made = []

    def new_database() -> str:
        name = f"tunedesk_{len(made)}"
        with psycopg.connect(base.format("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return base.format(name)

    try:
        yield new_database
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)
