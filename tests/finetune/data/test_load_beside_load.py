"""Two dataset loads at once (Check beside a preview) must not break each other's progress bars.

datasets reads through tqdm's ``thread_map``; its ``ensure_lock`` deletes tqdm's class lock on
exit when it created it, and a bar of the other load then failed to close ("type object 'tqdm'
has no attribute '_lock'"; seen in CI as a refused Start). The test replays that interleaving in
a fresh process, where no bar has made the lock yet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

INTERLEAVING = """
import io
{prelude}
from datasets.utils.tqdm import tqdm
from tqdm.contrib.concurrent import ensure_lock

with ensure_lock(tqdm):  # one load's thread_map, begun and ended ...
    bar = tqdm(total=1, file=io.StringIO())  # ... while the other load's bar was open
bar.close()
print("closed")
"""


def _replay(prelude: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", INTERLEAVING.format(prelude=prelude)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_interleaving_breaks_tqdm_alone():
    done = _replay("")
    assert done.returncode != 0 and "_lock" in done.stderr, (done.stdout, done.stderr[-800:])


def test_a_bar_closes_after_another_loads_thread_map_once_the_loader_is_imported():
    done = _replay("import finetune.data.load")
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]


def test_two_loads_in_threads_read_all_rows(tmp_path):
    import threading

    from finetune import data

    rows, errors = [], []

    def load():
        try:
            rows.append(len(data.load_rows(str(ROOT / "assets" / "demo_support.jsonl"))))
        except Exception as err:  # noqa: BLE001 - the test reports any failure
            errors.append(repr(err))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(rows)) == 1 and rows[0] > 0, (rows, errors)
