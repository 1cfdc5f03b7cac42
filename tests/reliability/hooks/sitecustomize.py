"""Test-only fault hook, loaded by the training child through PYTHONPATH (see
test_faults_in_training_runs.py).

With ``TUNEDESK_TEST_SAVE_PAUSE=<point>`` the adapter save stops at that point, writes the
file named by ``TUNEDESK_TEST_SAVE_MARK`` and sleeps, so the test can SIGKILL the child at an
exact moment of the atomic save instead of hoping a random timer lands there:

- ``start``: the hidden temp folder exists, nothing is written into it yet;
- ``written``: every adapter file is written into the temp folder, not yet renamed;
- ``renamed``: the folder is on the shelf, the "saved" event is not yet written.

Nothing here runs unless the variable is set; the product code has no test hooks.
"""

import os

if os.environ.get("TUNEDESK_TEST_SAVE_PAUSE"):
    import contextlib
    import time
    from pathlib import Path

    from core import paths

    _POINT, _REAL = os.environ["TUNEDESK_TEST_SAVE_PAUSE"], paths.atomic_dir

    def _pause(point: str, folder: Path) -> None:
        if point == _POINT:
            Path(os.environ["TUNEDESK_TEST_SAVE_MARK"]).write_text(str(folder))
            time.sleep(600)  # the test kills us here

    @contextlib.contextmanager
    def _paused_atomic_dir(target: Path):
        shelf = target.parent.name == "adapters"  # checkpoints go through here too: not paused
        with _REAL(target) as tmp:
            if shelf:
                _pause("start", tmp)
            yield tmp
            if shelf:
                _pause("written", tmp)
        if shelf:
            _pause("renamed", target)

    paths.atomic_dir = _paused_atomic_dir
