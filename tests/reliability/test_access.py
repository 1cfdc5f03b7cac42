"""Access: who can reach the app, what code it runs, and what it writes down.

- It listens on 127.0.0.1 unless told otherwise, and refuses to start on another address or
  with a share link without ``--auth`` (the rules themselves: tests/test_app.py).
- Started with ``--auth``, every API route refuses a request without a login.
- Code shipped with a model (``auto_map`` in config.json) never runs unless the run config
  turns ``model.trust_remote_code`` on for that model.
- Neither the ``--auth`` password nor an ``HF_TOKEN`` in the environment ends up in any file
  under the home folder: app log, run files, adapter manifest and model card.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from running_app import (
    CHAT,
    ROOT,
    START_TRAINING,
    answer_text,
    chat_settings,
    clean_env,
    free_port,
    start_app,
    tiny_train_inputs,
    wait_for_run,
)

USER, PASSWORD = "ana", "pw-Secret-4711"
HF_TOKEN = "hf_secret-xyz-0123456789"


# -- where it listens ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host", "192.0.2.10"], ["--share"]])
def test_the_real_app_refuses_exposure_without_auth(args, tmp_path):
    port = free_port()
    done = subprocess.run(
        [sys.executable, "app.py", "--port", str(port), *args],
        cwd=ROOT,
        env={**clean_env(), "TUNEDESK_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "without authentication" in done.stderr and "--auth" in done.stderr
    assert not list(tmp_path.iterdir()), "it wrote to the home folder before refusing"


@pytest.fixture(scope="module")
def auth_app(varied_dir, tmp_path_factory):
    """The app with ``--auth`` (no --host) and an HF token in its environment."""
    home = tmp_path_factory.mktemp("auth-home")
    auth = f"{USER}:{PASSWORD}"
    with start_app(varied_dir, home, "--auth", auth, env={"HF_TOKEN": HF_TOKEN}) as app:
        yield app


def test_listens_on_localhost_only_by_default(auth_app):
    assert auth_app.listen_addresses() == {"127.0.0.1"}


# -- authentication ---------------------------------------------------------------------------

CHAT_BODY = {"data": [[], "hi", *chat_settings(4)]}


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("GET", "config", None),
        ("GET", "gradio_api/info", None),
        ("GET", "gradio_api/queue/status", None),
        ("POST", "gradio_api/call/chat", CHAT_BODY),
        ("POST", "gradio_api/run/chat", CHAT_BODY),
        ("POST", "gradio_api/queue/join", {**CHAT_BODY, "fn_index": 0, "session_hash": "x"}),
        ("GET", "gradio_api/queue/data?session_hash=x", None),
        ("GET", "gradio_api/file=/etc/hostname", None),
    ],
)
def test_requests_without_a_login_are_refused(auth_app, method, path, body):
    r = httpx.request(method, auth_app.url + path, json=body, timeout=30)
    assert r.status_code == 401, (r.status_code, r.text[:200])


def test_a_wrong_password_is_refused_and_the_right_one_works(auth_app):
    with httpx.Client(base_url=auth_app.url, timeout=30) as http:
        bad = http.post("login", data={"username": USER, "password": "wrong-guess"})
        assert bad.status_code == 400 and "Incorrect credentials" in bad.text
        assert http.get("gradio_api/info").status_code == 401
        good = http.post("login", data={"username": USER, "password": PASSWORD})
        assert good.status_code == 200
        assert http.get("gradio_api/info").status_code == 200  # the session cookie now opens it


def test_no_secret_reaches_any_file_under_home(auth_app, varied_dir):
    """Chat and train through the logged-in API with HF_TOKEN set, then grep the whole home."""
    from gradio_client import Client

    client = Client(auth_app.url, auth=(USER, PASSWORD), verbose=False)
    assert answer_text(client.predict([], "Where is my invoice?", *chat_settings(8), api_name=CHAT))
    message = client.predict(
        *tiny_train_inputs(varied_dir, "secret-check", 4), api_name=START_TRAINING
    )
    run_id = re.search(r"Started run `([^`]+)`", message).group(1)
    child = json.loads((auth_app.home / "runs" / run_id / "status.json").read_text()).get("pid")
    # The token really is within the training child's reach (it may need it for the Hub).
    environ = _read_environ(child)
    assert environ is None or f"HF_TOKEN={HF_TOKEN}".encode() in environ
    status = wait_for_run(auth_app.home, run_id)
    assert status["state"] == "done", status
    time.sleep(0.5)  # let the app's log catch up

    files = [p for p in auth_app.home.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {
        "app.log",
        "events.jsonl",
        "status.json",
        "config.json",
        "train.log",
        "manifest.json",
        "README.md",
    } <= names, names
    leaks = [
        (str(p.relative_to(auth_app.home)), secret)
        for p in files
        for secret in (PASSWORD, HF_TOKEN)
        if secret.encode() in p.read_bytes()
    ]
    assert not leaks, leaks


def _read_environ(pid: int | None) -> bytes | None:
    """The process's environment, or None once it has exited (a tiny run can finish before
    the test looks; an exited child not yet reaped reads as empty)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes() or None if pid else None
    except OSError:  # already gone
        return None


# -- trust_remote_code ------------------------------------------------------------------------

CUSTOM_CODE = """
import pathlib
pathlib.Path({marker!r}).write_text("the model's own code ran")
from transformers import LlamaConfig, LlamaForCausalLM


class CustomConfig(LlamaConfig):
    model_type = {model_type!r}


class CustomForCausalLM(LlamaForCausalLM):
    config_class = CustomConfig
"""


def _model_with_code(src: Path, folder: Path, model_type: str) -> tuple[Path, Path]:
    """A copy of ``src`` whose config.json points (auto_map) at a module that leaves a marker."""
    shutil.copytree(src, folder)
    marker = folder.parent / f"{folder.name}-CODE-RAN"
    code = CUSTOM_CODE.format(marker=str(marker), model_type=model_type)
    (folder / "custom_model.py").write_text(code)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {
        "AutoConfig": "custom_model.CustomConfig",
        "AutoModelForCausalLM": "custom_model.CustomForCausalLM",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def test_trust_remote_code_is_off_unless_the_run_config_turns_it_on():
    from finetune.commands.train import add_arguments, build_config
    from finetune.config import RunConfig
    from ui.views import forms

    assert RunConfig().model.trust_remote_code is False
    assert forms.ui_defaults().model.trust_remote_code is False  # the Train tab never turns it on
    opted_in = RunConfig.from_dict({"model": {"trust_remote_code": True}})
    assert opted_in.model.trust_remote_code is True

    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert build_config(parser.parse_args([])).model.trust_remote_code is False
    assert build_config(parser.parse_args(["--trust-remote-code"])).model.trust_remote_code is True


def test_training_loaders_never_run_model_code_by_default(tiny_llama_dir, tmp_path):
    from core import models
    from finetune.config import ModelArgs
    from finetune.train.model_loading import load_model, load_tokenizer

    trust = ModelArgs().trust_remote_code
    # A known architecture with an auto_map: loaded with transformers' own class, code ignored.
    folder, marker = _model_with_code(tiny_llama_dir, tmp_path / "llama-with-code", "llama")
    resolved = models.resolve(str(folder))
    load_tokenizer(resolved, trust)
    assert type(load_model(resolved, trust_remote_code=trust)).__name__ == "LlamaForCausalLM"
    assert not marker.exists()
    # An architecture only its own code defines: refused with a reason, code not run.
    folder, marker = _model_with_code(tiny_llama_dir, tmp_path / "custom-only", "tunedesk_custom")
    with pytest.raises(ValueError, match="custom code"):
        load_model(models.resolve(str(folder)), trust_remote_code=trust)
    assert not marker.exists()


SESSION_THEN_OPT_IN = """
import json, sys
from inference.session import ModelSession
from core import models
from finetune.train.model_loading import load_model

folder, marker = sys.argv[1], sys.argv[2]
try:
    ModelSession(folder).load()
    session = "loaded"
except Exception as err:
    session = f"{type(err).__name__}: {err}"
after_session = __import__("os").path.exists(marker)
model = load_model(models.resolve(folder), trust_remote_code=True)
print(json.dumps({"session": session, "ran_after_session": after_session,
                  "opted_in_class": type(model).__name__,
                  "ran_after_opt_in": __import__("os").path.exists(marker)}))
"""


def test_chat_session_never_runs_model_code_even_if_stdin_says_yes(tiny_llama_dir, tmp_path):
    """Unset, transformers asks on stdin and runs the code on "y"; the session must not ask.

    The second half opts in explicitly and sees the code run: the marker is a real detector.
    """
    folder, marker = _model_with_code(tiny_llama_dir, tmp_path / "custom-only", "tunedesk_custom")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TUNEDESK_HOME": str(tmp_path / "home"),
        "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),
    }
    done = subprocess.run(
        [sys.executable, "-c", SESSION_THEN_OPT_IN, str(folder), str(marker)],
        cwd=ROOT,
        env=env,
        input="y\n" * 5,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout[done.stdout.rindex('{"session"') :])  # after any stdin prompt
    assert result["session"].startswith("ValueError") and "custom code" in result["session"], result
    assert result["ran_after_session"] is False, result
    assert result["opted_in_class"] == "CustomForCausalLM", result
    assert result["ran_after_opt_in"] is True, result
