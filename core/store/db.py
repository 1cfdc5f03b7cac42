"""The store's connection: SQLite in the home folder, or a PostgreSQL several replicas share.

By default the store is ``<home>/tunedesk.db``, opened with the standard library's ``sqlite3``
in WAL mode (readers never wait for the writer) with a busy timeout, so the API, the Review tab
and ``python -m feedback review`` write to it at the same time without losing a row. With
``TUNEDESK_DATABASE_URL=postgresql://...`` it is that database instead (psycopg 3), and every
app replica that names it shares answers, ratings, the review queue, version stats and the
alias audit.

Both run the numbered migrations of ``core/store/migrations/`` (``001_init.sql`` ...) once, in
order, under a lock (SQLite's write lock, PostgreSQL's advisory lock). SQL is written once with
``?`` placeholders; :class:`Store` turns them into psycopg's ``%s``. Each thread (and each
process) gets its own connection.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

DB_FILE = "tunedesk.db"
URL_ENV = "TUNEDESK_DATABASE_URL"
BUSY_TIMEOUT_S = 30.0
MIGRATIONS = Path(__file__).with_name("migrations")
SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGSERIAL PRIMARY KEY"}
MIGRATION_LOCK = 560_001  # PostgreSQL advisory lock id held while migrating
_CLOSING = threading.Lock()


class Store:
    """One database: SQLite (a file) or PostgreSQL (a URL).

    Args:
        target: the SQLite file's path, or a ``postgresql://`` URL.
    """

    def __init__(self, target: str | Path):
        target = str(target)
        self.dialect = "postgres" if re.match(r"postgres(ql)?://", target) else "sqlite"
        self.target = target
        self._local = threading.local()
        self._opened: list = []  # every thread's connection, so close() can reach them all
        self._generation = 0

    def __repr__(self) -> str:
        where = (
            self.target if self.dialect == "sqlite" else re.sub(r"//[^@/]*@", "//***@", self.target)
        )
        return f"Store({self.dialect}: {where})"

    def query(self, sql: str, params: tuple | list = ()) -> list[dict]:
        """The rows ``sql`` selects, as dicts."""
        cursor = self._run(sql, params)
        if cursor.description is None:
            return []
        if self.dialect == "sqlite":
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        return list(cursor.fetchall())

    def execute(self, sql: str, params: tuple | list = ()) -> int:
        """Run one statement; the number of rows it changed."""
        return self._run(sql, params).rowcount

    @contextmanager
    def transaction(self):
        """One transaction on this thread's connection: committed at the end, rolled back on
        an error. SQLite takes its write lock at the start (``BEGIN IMMEDIATE``), so a read then
        write inside never meets another writer in between."""
        conn = self._connection()
        if getattr(self._local, "depth", 0):
            yield self
            return
        self._local.depth = 1
        try:
            if self.dialect == "sqlite":
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            else:
                with conn.transaction():
                    yield self
        finally:
            self._local.depth = 0

    def migrate(self) -> list[int]:
        """Apply the migrations not applied yet, in order; the numbers applied now."""
        applied = []
        with self.transaction():
            if self.dialect == "postgres":
                self.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            self.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)"
            )
            done = {r["version"] for r in self.query("SELECT version FROM schema_migrations")}
            for number, path in migrations():
                if number in done:
                    continue
                for statement in statements(path.read_text(encoding="utf-8"), self.dialect):
                    self.execute(statement)
                self.execute(
                    "INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)",
                    (number, path.name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                )
                applied.append(number)
        return applied

    def close(self) -> None:
        """Close every thread's connection (a thread's next statement opens a new one): for
        tools and tests that need the database file closed, e.g. before remounting the home."""
        with _CLOSING:
            opened, self._opened = self._opened, []
            self._generation += 1
        for conn in opened:
            conn.close()

    def _run(self, sql: str, params):
        conn = self._connection()
        try:
            return conn.execute(self._sql(sql), tuple(params))
        except Exception:
            # A PostgreSQL that restarted (or a network that dropped) closes this thread's
            # connection: outside a transaction the statement is tried again on a new one.
            if self.dialect != "postgres" or not conn.closed or getattr(self._local, "depth", 0):
                raise
            self._local.conn = None
            return self._connection().execute(self._sql(sql), tuple(params))

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgres" else sql

    def _connection(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.key == (os.getpid(), self._generation):
            return conn
        if self.dialect == "sqlite":
            Path(self.target).parent.mkdir(parents=True, exist_ok=True)
            # autocommit (isolation_level None): transactions are begun explicitly, above
            conn = sqlite3.connect(
                self.target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL keeps this crash-safe
        else:
            conn = postgres_connection(self.target)
        self._local.conn, self._local.key = conn, (os.getpid(), self._generation)
        with _CLOSING:
            self._opened.append(conn)
        return conn


def _use_wal(conn, wait_s: float = BUSY_TIMEOUT_S) -> None:
    """Put SQLite connection ``conn`` in WAL mode. Switching needs the file to itself for a moment,
    and while another process opens, switches or recovers the same file SQLite may answer
    "database is locked" at once rather than after its busy timeout (seen with two processes
    opening a new store together); asked again until ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def postgres_connection(url: str):
    """An autocommit psycopg connection whose rows are dicts.

    Raises:
        RuntimeError: psycopg is not installed, in a sentence saying how to install it.
    """
    try:
        import psycopg
        from psycopg.rows import dict_row
    except ImportError:
        raise RuntimeError(
            f"{URL_ENV} names a PostgreSQL database, but psycopg is not installed: "
            "pip install 'psycopg[binary]'"
        ) from None
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def migrations() -> list[tuple[int, Path]]:
    """The numbered migration files (``NNN_name.sql``), in order."""
    found = []
    for path in sorted(MIGRATIONS.glob("*.sql")):
        number = re.match(r"(\d+)_", path.name)
        if number:
            found.append((int(number.group(1)), path))
    return found


def statements(script: str, dialect: str) -> list[str]:
    """A migration's statements for ``dialect``: comments dropped, ``{serial}`` filled in."""
    text = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    text = text.replace("{serial}", SERIAL[dialect])
    return [s.strip() for s in text.split(";") if s.strip()]
