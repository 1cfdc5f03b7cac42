"""Off localhost (an exposed app or API), path boxes read only under the home folder and the
project's assets, and error text shown to users carries no class names, tracebacks or server
paths; on localhost both stay as they were."""

from __future__ import annotations

import pytest

from core import paths
from core.hosts import EXPOSED_ENV, exposed, set_exposed
from core.user_text import public_text, shown_error


@pytest.fixture
def off_localhost(monkeypatch):
    monkeypatch.setenv(EXPOSED_ENV, "0")
    assert set_exposed("0.0.0.0") and exposed()


def test_only_localhost_and_no_share_link_is_not_exposed(monkeypatch):
    monkeypatch.setenv(EXPOSED_ENV, "0")
    assert not set_exposed("127.0.0.1") and not exposed()
    assert set_exposed("127.0.0.1", share=True) and exposed()


def test_path_boxes_read_only_under_the_home_off_localhost(home, tmp_path, monkeypatch):
    outside = tmp_path / "secret.txt"
    outside.write_text("password")
    inside = home / "datasets" / "mine.jsonl"
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_text("{}\n")
    link = home / "datasets" / "link.jsonl"
    link.symlink_to(outside)
    monkeypatch.setenv(EXPOSED_ENV, "0")
    assert paths.readable(str(outside)) == outside  # on localhost: any file, as before
    set_exposed("0.0.0.0")
    assert paths.readable(str(inside)) == inside
    assert paths.readable("assets/demo_support.jsonl").name == "demo_support.jsonl"  # the demo data
    for typed in (str(outside), "/etc/passwd", str(link), str(home / ".." / "secret.txt")):
        with pytest.raises(ValueError, match="must be a file under the home folder") as refused:
            paths.readable(typed, "the dataset path")
        assert str(tmp_path) not in str(refused.value) and "passwd" not in str(refused.value)


def test_the_train_and_import_boxes_refuse_a_server_file_off_localhost(home, off_localhost):
    from ui.views.train_actions import DATA_SOURCES, data_preview
    from ui.views.transcripts import import_export

    text, table = data_preview(DATA_SOURCES[2], None, "/etc/passwd")
    assert table is None and text == (
        "⚠️ the dataset path must be a file under the home folder when the "
        "app is used off localhost; upload the file instead"
    )
    text, rows, train, held_out = import_export(None, "/etc/passwd")
    assert (rows, train, held_out) == ([], None, None) and "under the home folder" in text


def test_error_text_off_localhost_names_no_class_trace_or_server_path(monkeypatch):
    from serve.api_basics import engine_failure
    from serve.interface.bounds import failure_sentence

    err = RuntimeError("cannot open /srv/tunedesk/models/base/model.safetensors")
    monkeypatch.setenv(EXPOSED_ENV, "0")
    assert (
        failure_sentence(err) == f"the answer failed: RuntimeError: {err}"
    )  # localhost: all of it
    set_exposed("10.0.0.5")
    assert failure_sentence(err) == "the answer failed: cannot open …/model.safetensors"
    api = engine_failure(err)
    assert api.status == 500 and str(api) == "the answer failed: cannot open …/model.safetensors"
    shown = shown_error(
        'boom in /home/ana/x.py\nTraceback (most recent call last):\n  File "/a/b.py"'
    )
    assert shown == "boom in …/x.py"
    assert public_text("httpx.ReadTimeout: timed out") == "timed out"
    assert (
        public_text("KeyError: 'x' at /opt/td/core/paths.py, see 3/4")
        == "'x' at …/paths.py, see 3/4"
    )
