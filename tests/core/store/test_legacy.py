"""The JSON-lines files of older versions: imported once, at first start; the files untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.store.home import open_store
from core.store.tables import audit_rows, rating_rows

ROOT = Path(__file__).resolve().parents[3]
RATING = {
    "answer_id": "chatcmpl-1",
    "created": "2026-11-20T10:00:00",
    "adapter": "support-v2",
    "version": "ab12",
    "engine": "pytorch",
    "source": "api",
    "messages": None,
    "answer": None,
    "status": "new",
    "intent": None,
    "correction": None,
}


def _old_home(home: Path) -> dict[Path, bytes]:
    (home / "feedback").mkdir(parents=True)
    (home / "releases").mkdir()
    files = {
        home / "feedback" / "ratings.jsonl": "".join(
            json.dumps({**RATING, "id": f"fb-{i}", "rating": r}) + "\n"
            for i, r in enumerate(["down", "down", "up"])
        )
        + "{torn\n"
        + json.dumps({**RATING, "id": "fb-9", "rating": "up", "verdict": "cmp-1"})
        + "\n",
        home / "feedback" / "answers.jsonl": json.dumps(
            {
                "id": "chatcmpl-1",
                "adapter": "support-v2",
                "version": "ab12",
                "engine": "pytorch",
                "source": "api",
                "created": "x",
                "messages": [{"role": "user", "content": "hi"}],
                "answer": "hello",
                "extra": {},
            }
        )
        + "\n",
        home / "releases" / "audit.jsonl": json.dumps(
            {
                "id": "a1",
                "time": "2026-11-20T10:00:00Z",
                "by": "ana",
                "alias": "support-bot",
                "action": "set",
                "from": None,
                "to": {"v3": 100},
            }
        )
        + "\n",
    }
    for path, text in files.items():
        path.write_text(text)
    return {path: path.read_bytes() for path in files}


def test_old_files_are_imported_once_at_first_start_and_left_as_they_were(home):
    before = _old_home(home)
    mtimes = {path: path.stat().st_mtime_ns for path in before}
    store = open_store(home)
    rows = rating_rows(store)
    assert [(r["id"], r["rating"], r["rater"]) for r in rows] == [
        ("fb-0", "down", None),
        ("fb-1", "down", None),
        ("fb-2", "up", None),
        ("fb-9", "up", None),
    ]
    assert rows[3]["verdict"] == "cmp-1"  # a field of its own comes back as it was
    assert [r["by"] for r in audit_rows(store, "support-bot")] == ["ana"]
    assert store.query("SELECT answer FROM answers WHERE id = 'chatcmpl-1'")[0]["answer"] == "hello"
    assert {path: path.read_bytes() for path in before} == before
    assert {path: path.stat().st_mtime_ns for path in before} == mtimes
    # a later start, in another process: nothing imported twice, even with the files grown since
    with open(home / "feedback" / "ratings.jsonl", "a") as grown:
        grown.write(json.dumps({**RATING, "id": "fb-late", "rating": "down"}) + "\n")
    code = (
        "import sys; from core.store.home import open_store; "
        "from core.store.tables import rating_rows; "
        "print(len(rating_rows(open_store(sys.argv[1]))))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "4" and len(rating_rows(store)) == 4
    assert [
        r["rows_imported"] for r in store.query("SELECT rows_imported FROM imports ORDER BY name")
    ] == [1, 4, 1]
