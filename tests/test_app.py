"""app.py's serving rules: localhost by default, authentication required anywhere else; a
bad flag value is one sentence and exit status 2, as argparse and python -m serve answer it."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import app

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_listen_on_localhost_only(monkeypatch):
    for var in ("TUNEDESK_HOST", "TUNEDESK_PORT", "TUNEDESK_AUTH"):
        monkeypatch.delenv(var, raising=False)
    args = app.parse_args([])
    assert (args.host, args.port, args.auth) == ("127.0.0.1", 7860, None)
    assert app.check_access(args.host, args.auth, share=False) is None


@pytest.mark.parametrize(
    "host,share", [("0.0.0.0", False), ("192.0.2.10", False), ("127.0.0.1", True)]
)
def test_exposure_without_auth_is_refused(host, share):
    with pytest.raises(ValueError) as info:
        app.check_access(host, None, share)
    assert "without authentication" in str(info.value) and "--auth" in str(info.value)


def test_auth_allows_other_addresses_and_must_be_well_formed():
    assert app.check_access("0.0.0.0", "ana:s3cret", share=False) == ("ana", "s3cret")
    for bad in ("ana", "ana:", ":pw"):
        with pytest.raises(ValueError, match="user:password"):
            app.check_access("0.0.0.0", bad, share=False)


def test_env_vars_configure_the_server(monkeypatch):
    monkeypatch.setenv("TUNEDESK_HOST", "0.0.0.0")
    monkeypatch.setenv("TUNEDESK_PORT", "8080")
    monkeypatch.setenv("TUNEDESK_AUTH", "a:b")
    args = app.parse_args([])
    assert (args.host, args.port) == ("0.0.0.0", 8080)
    assert app.check_access(args.host, args.auth, share=False) == ("a", "b")


def test_the_pages_login_is_not_an_api_key_and_a_guarded_api_has_one(monkeypatch):
    for name in ("TUNEDESK_API_KEY", "TUNEDESK_CHAT_KEYS", "TUNEDESK_ADMIN_KEYS"):
        monkeypatch.delenv(name, raising=False)
    assert (
        app.api_keys(None, None).empty and not app.api_keys(None, None).closed
    )  # local, no login: open
    behind_login = app.api_keys(None, ("ana", "s3cret"))
    assert (
        behind_login.empty and behind_login.closed
    )  # refuses every request; the password opens nothing
    assert app.api_keys(None, None, "0.0.0.0").closed
    monkeypatch.setenv("TUNEDESK_CHAT_KEYS", "web:chat-key-1, app:chat-key-2")
    monkeypatch.setenv("TUNEDESK_ADMIN_KEYS", "ana:admin-key-1")
    args = app.parse_args(["--api-key", "old-key-123", "--auth", "ana:s3cret"])
    keys = app.api_keys(args.api_key, app.check_access(args.host, args.auth, False))
    assert keys.chat == {"web": "chat-key-1", "app": "chat-key-2", "api-key": "old-key-123"}
    assert keys.admin == {"ana": "admin-key-1"}
    monkeypatch.setenv("TUNEDESK_ADMIN_KEYS", "ana:chat-key-1")
    with pytest.raises(ValueError, match="one key is given to two names"):
        app.api_keys(None, None)


def test_the_app_and_python_m_serve_read_each_serving_setting_alike(monkeypatch):
    from serve.__main__ import build_parser

    monkeypatch.setenv("TUNEDESK_ENGINE", "llama.cpp")
    monkeypatch.setenv("TUNEDESK_LOG_CONVERSATIONS", "1")
    argv = ["--host", "0.0.0.0", "--api-key", "k-1", "--answer-idle-timeout", "12"]
    from_app = vars(app.parse_args(argv))
    from_serve = vars(build_parser().parse_args(argv))
    shared = {"host", "model", "engine", "api_key", "log_conversations", "answer_idle_timeout"}
    shared |= {"answer_timeout"}
    assert {k: from_app[k] for k in shared} == {k: from_serve[k] for k in shared}
    assert from_serve["engine"] == "llama.cpp" and from_serve["log_conversations"] is True
    assert from_serve["answer_idle_timeout"] == 12.0 and from_app["port"] != from_serve["port"]


def run_app(*argv: str, home: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    for name in ("TUNEDESK_HOST", "TUNEDESK_PORT", "TUNEDESK_AUTH", "TUNEDESK_API_KEY"):
        env.pop(name, None)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "app.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.perf_counter() - start


def test_a_bad_address_auth_or_port_is_one_sentence_and_exit_2_before_anything_loads(tmp_path):
    """An open address without --auth exited 1 (python -m serve: 2); a host that is no address
    here, or a port in use, loaded the model and the pages, then failed in Gradio."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        # it said "error: [Errno 20] Not a directory: '.../a-file/home'" once the pages loaded
        ("--home", f"{a_file}/home"): f"error: --home {a_file}/home cannot hold TuneDesk's "
        "data (Not a directory); name a folder this user can write (it is made when missing)",
        ("--host", "0.0.0.0"): "error: refusing to listen on address 0.0.0.0 without "
        "authentication; add --auth user:password",
        ("--auth", "ana"): "error: --auth must look like user:password",
        ("--host", "192.0.2.10", "--auth", "a:b"): "error: cannot listen on 192.0.2.10:7860 "
        "(Cannot assign requested address); give --host an address of this machine",
        ("--port", port): f"error: --port {port} is in use on 127.0.0.1: another server "
        "listens there; stop it or give another --port",
    }
    with taken:
        for argv, said in cases.items():
            done, seconds = run_app(*argv, home=tmp_path / "home")
            assert done.returncode == 2, (argv, done.stderr)
            assert done.stderr.startswith(said) and len(done.stderr.splitlines()) == 1, argv
            assert seconds < 20, (argv, seconds)  # nothing loaded: no model, no pages
    assert not (tmp_path / "home").exists()


def test_help_names_the_variable_each_flag_reads(monkeypatch, capsys):
    for var in ("TUNEDESK_HOME", "TUNEDESK_AUTH", "TUNEDESK_PORT", "TUNEDESK_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # one line per flag
    with pytest.raises(SystemExit):
        app.parse_args(["--help"])
    lines = {
        line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line[:4] == "  --"
    }
    for flag, var in (("--home", "$TUNEDESK_HOME"), ("--auth", "$TUNEDESK_AUTH")):
        assert var in lines[flag], lines[flag]
    assert "./outputs" in lines["--home"]
    assert "$TUNEDESK_PORT" in lines["--port"] and "$TUNEDESK_HOST" in lines["--host"]
