"""app.py's serving rules: localhost by default, authentication required anywhere else."""

import pytest

import app


def test_defaults_listen_on_localhost_only(monkeypatch):
    for var in ("TUNEDESK_HOST", "TUNEDESK_PORT", "TUNEDESK_AUTH"):
        monkeypatch.delenv(var, raising=False)
    args = app.parse_args([])
    assert (args.host, args.port, args.auth) == ("127.0.0.1", 7860, None)
    assert app.check_access(args.host, args.auth, share=False) is None


@pytest.mark.parametrize("host,share", [("0.0.0.0", False), ("192.0.2.10", False), ("127.0.0.1", True)])
def test_exposure_without_auth_is_refused(host, share):
    with pytest.raises(SystemExit) as info:
        app.check_access(host, None, share)
    assert "without authentication" in str(info.value) and "--auth" in str(info.value)


def test_auth_allows_other_addresses_and_must_be_well_formed():
    assert app.check_access("0.0.0.0", "ana:s3cret", share=False) == ("ana", "s3cret")
    for bad in ("ana", "ana:", ":pw"):
        with pytest.raises(SystemExit, match="user:password"):
            app.check_access("0.0.0.0", bad, share=False)


def test_env_vars_configure_the_server(monkeypatch):
    monkeypatch.setenv("TUNEDESK_HOST", "0.0.0.0")
    monkeypatch.setenv("TUNEDESK_PORT", "8080")
    monkeypatch.setenv("TUNEDESK_AUTH", "a:b")
    args = app.parse_args([])
    assert (args.host, args.port) == ("0.0.0.0", 8080)
    assert app.check_access(args.host, args.auth, share=False) == ("a", "b")


def test_the_api_asks_for_a_key_whenever_the_pages_ask_for_a_login(monkeypatch):
    monkeypatch.delenv("TUNEDESK_API_KEY", raising=False)
    assert app.api_key(app.parse_args([]).api_key, None) is None
    assert app.api_key(None, ("ana", "s3cret")) == "s3cret"
    args = app.parse_args(["--api-key", "k-123", "--auth", "ana:s3cret"])
    assert app.api_key(args.api_key, app.check_access(args.host, args.auth, False)) == "k-123"
