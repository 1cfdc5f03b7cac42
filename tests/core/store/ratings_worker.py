"""The store's concurrency tests' two sides, each run as its own process (not a test file).

``python ratings_worker.py rate N PREFIX``: like the API, records N answers and rates each (one
rater per answer, as a key would). ``python ratings_worker.py review N``: like ``python -m
feedback review``, accepts and drops new ratings as they appear until N are reviewed, printing
each decision as a JSON line. The home is ``$TUNEDESK_HOME``; the store is
``$TUNEDESK_DATABASE_URL`` when set, else the home's SQLite file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from feedback.review import Filter, queue, review  # noqa: E402
from feedback.store import FeedbackStore  # noqa: E402

ASKED = [{"role": "user", "content": "Where is my order?"}]


def run_both(
    rater_home: Path, reviewer_home: Path, count: int, url: str | None = None
) -> tuple[dict, float]:
    """Rate ``count`` answers in one process while another reviews them; (the reviewer's
    decisions by rating id, seconds taken)."""
    env = {**os.environ, "TUNEDESK_DATABASE_URL": url or ""}
    started = time.perf_counter()
    rater = subprocess.Popen(
        [sys.executable, __file__, "rate", str(count), "api"],
        env={**env, "TUNEDESK_HOME": str(rater_home)},
        stderr=subprocess.PIPE,
        text=True,
    )
    reviewer = subprocess.Popen(
        [sys.executable, __file__, "review", str(count)],
        env={**env, "TUNEDESK_HOME": str(reviewer_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, review_err = reviewer.communicate(timeout=300)
    _, rate_err = rater.communicate(timeout=300)
    assert rater.returncode == 0, rate_err
    assert reviewer.returncode == 0, review_err
    decisions = {}
    for line in out.splitlines():
        row = json.loads(line)
        decisions[row["id"]] = row["status"]
    return decisions, time.perf_counter() - started


def rate(count: int, prefix: str) -> None:
    store = FeedbackStore(log_conversations=True)
    for i in range(count):
        answer_id = f"{prefix}-{i}"
        store.record(answer_id, "support-v2", "ab12", "pytorch", ASKED, f"answer {i}")
        store.rate(answer_id, "down" if i % 3 else "up", source="api", rater=f"key-{prefix}")


def review_all(count: int, give_up_s: float = 240.0) -> None:
    store, done, deadline = FeedbackStore(), 0, time.monotonic() + give_up_s
    while done < count and time.monotonic() < deadline:
        for row in queue(store, Filter(status="new")):
            status = "accepted" if done % 2 else "dropped"
            review(store, row["id"], status)
            print(json.dumps({"id": row["id"], "status": status}), flush=True)
            done += 1


if __name__ == "__main__":
    if sys.argv[1] == "rate":
        rate(int(sys.argv[2]), sys.argv[3])
    else:
        review_all(int(sys.argv[2]))
