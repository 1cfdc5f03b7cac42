"""The app's Gradio event handlers as plain functions, for calling them without a browser.

``build_app`` wires closures such as ``on_start`` or ``respond`` into the Blocks; this finds
them by function name so a test can call exactly what a button press would run and read the
message the user would see. One app per model folder and ``TUNEDESK_HOME``: an app fixes its
home at first use (its session's shelf, its stats store), so each test home gets its own app.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path


def handlers(model_dir: Path) -> dict:
    """``{function name: handler}`` of an app on ``model_dir`` under the current home
    (``TUNEDESK_HOME``, or a scratch folder when none is set); names used once only."""
    return _handlers(Path(model_dir), os.environ.get("TUNEDESK_HOME"))


@functools.lru_cache(maxsize=4)
def _handlers(model_dir: Path, home: str | None) -> dict:
    from ui.app import build_app
    from ui.views.state import AppState

    if home is None:  # no test home: a scratch one, removed at exit
        home = tempfile.mkdtemp(prefix="tunedesk-ui-")
        atexit.register(shutil.rmtree, home, True)
    old = os.environ.get("TUNEDESK_HOME")
    os.environ["TUNEDESK_HOME"] = home
    try:
        demo = build_app(state=AppState(str(model_dir)))
    finally:
        if old is None:
            os.environ.pop("TUNEDESK_HOME", None)
        else:
            os.environ["TUNEDESK_HOME"] = old
    found: dict[str, list] = {}
    for block_fn in demo.fns.values():
        found.setdefault(block_fn.name, []).append(block_fn.fn)
    table = {name: fns[0] for name, fns in found.items() if len({id(f) for f in fns}) == 1}
    table["engine"] = demo.state
    table["blocks"] = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    return table


def last(generator_or_value):
    """The final value of a streaming handler (or the value of a plain one)."""
    if hasattr(generator_or_value, "__next__"):
        value = None
        for value in generator_or_value:  # noqa: B007  (we want the last one)
            pass
        return value
    return generator_or_value
