"""The store of a home folder: opened once per process, migrated, its old files imported."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from core import paths
from core.store.db import DB_FILE, URL_ENV, Store
from core.store.legacy import import_json_lines

_OPEN: dict[tuple[str, str], Store] = {}
_OPEN_LOCK = threading.Lock()


def open_store(home: Path | None = None) -> Store:
    """The store for ``home`` (default ``$TUNEDESK_HOME``): ``$TUNEDESK_DATABASE_URL`` when
    set, else ``<home>/tunedesk.db``. The first open in a process applies the migrations and
    imports the home's JSON-lines files that were never imported (each once, ever; the files
    are left as they were)."""
    home = Path(home).resolve() if home else paths.home()
    url = os.environ.get(URL_ENV, "").strip()
    key = (url or str(home / DB_FILE), str(home))
    with _OPEN_LOCK:
        store = _OPEN.get(key)
        if store is None:
            store = Store(url or home / DB_FILE)
            store.migrate()
            import_json_lines(store, home)
            _OPEN[key] = store
    return store


def close_stores() -> None:
    """Close every connection this process holds to any store (opened again when next used)."""
    with _OPEN_LOCK:
        stores = list(_OPEN.values())
    for store in stores:
        store.close()
