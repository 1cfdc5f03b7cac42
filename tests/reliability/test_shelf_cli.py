"""``python -m adapters``: the shelf from the command line, run as a user runs it.

Every command is a real subprocess on a real shelf. A refusal exits with code 2 and prints
the sentence the Adapters tab shows (its handlers are called in-process, as a button press
would), and leaves every file on the shelf byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from running_app import ROOT, clean_env
from tally import HOSTILE
from ui_handlers import handlers

from core import models
from core.hashing import file_hash


@pytest.fixture
def shelf(home, random_lora_dir, tiny_llama_dir) -> Path:
    """Two good adapters and a broken one (its weights changed after saving)."""
    for name in ("alpha", "beta", "gamma"):
        folder = home / "adapters" / name
        shutil.copytree(random_lora_dir, folder)
        weights = folder / "adapter_model.safetensors"
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "created": f"2026-01-0{len(name)}T00:00:00",
            "base_model": {
                "name": str(tiny_llama_dir),
                "weight_hash": models.resolve(str(tiny_llama_dir)).weight_hash,
            },
            "lora": {"r": 4, "alpha": 8},
            "adapter_hash": file_hash(weights),
            "adapter_bytes": weights.stat().st_size,
        }
        (folder / "manifest.json").write_text(json.dumps(manifest))
    gamma = home / "adapters" / "gamma" / "adapter_model.safetensors"
    data = bytearray(gamma.read_bytes())
    data[-2] ^= 0x55
    gamma.write_bytes(bytes(data))
    return home / "adapters"


def cli(home: Path, *args: str | bytes) -> subprocess.CompletedProcess:
    env = {**clean_env(), "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    argv = [
        os.fsencode(a) if isinstance(a, str) else a
        for a in (sys.executable, "-m", "adapters", *args)
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=300)


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def refused(home: Path, shelf: Path, *args: str | bytes) -> str:
    """Run a command that must be refused: exit 2, one line on stderr, shelf unchanged."""
    before = snapshot(shelf)
    result = cli(home, *args)
    assert result.returncode == 2, (args, out(result), err(result))
    assert "Traceback" not in err(result) and err(result).count("\n") == 1, err(result)
    assert snapshot(shelf) == before
    HOSTILE.add("python -m adapters: bad input", "exit 2, shelf unchanged")
    return err(result).removeprefix("error: ").strip()


def test_help_lists_every_command(home):
    result = cli(home, "--help")
    assert result.returncode == 0
    for command in ("list", "show", "rename", "delete", "import", "export"):
        assert command in out(result)


def test_list_and_show(home, shelf):
    listed = cli(home, "list")
    assert listed.returncode == 0
    rows = {line.split()[0]: line for line in out(listed).splitlines()[1:]}
    assert set(rows) == {"alpha", "beta", "gamma"}
    assert " ok " in rows["alpha"] and "broken" in rows["gamma"]
    assert "does not match its manifest" in rows["gamma"]
    as_json = [json.loads(line) for line in out(cli(home, "list", "--json")).splitlines()]
    assert {e["name"]: e["status"] for e in as_json} == {
        "alpha": "ok",
        "beta": "ok",
        "gamma": "broken",
    }
    shown = cli(home, "show", "alpha")
    assert shown.returncode == 0 and "r=4 alpha=8" in out(shown)
    broken = cli(home, "show", "gamma")  # readable, but not usable: exit 1
    assert broken.returncode == 1 and "does not match its manifest" in out(broken)
    assert refused(home, shelf, "show", "ghost").startswith("no adapter named 'ghost'")


def test_rename_says_what_the_tab_says(home, shelf, tiny_llama_dir):
    ui = handlers(tiny_llama_dir)
    taken = refused(home, shelf, "rename", "alpha", "beta")
    assert ui["on_rename"]("alpha", "beta")[0] == f"⚠️ {taken}"
    assert taken == "an adapter named 'beta' already exists; pick another name"
    long = refused(home, shelf, "rename", "alpha", "x" * 5000)
    assert "(5,000 characters)" in long and len(long) < 400
    # the tab's Markdown line keeps the sentence's backslash ("no '/', '\\' or '..'") escaped
    assert ui["on_rename"]("alpha", "x" * 5000)[0] == "⚠️ " + long.replace("\\", "\\\\")
    not_unicode = refused(home, shelf, "rename", "alpha", b"caf\xe9")  # Latin-1 bytes in argv
    assert not_unicode.startswith("the new name contains a character that is not valid Unicode")
    before = (shelf / "alpha" / "manifest.json").read_bytes()
    same = cli(home, "rename", "alpha", " alpha ")  # its own name: a no-op, like the tab's
    assert same.returncode == 0, same.stderr
    assert out(same).strip() == "alpha already has that name; nothing changed."
    assert ui["on_rename"]("alpha", "alpha")[0] == out(same).strip()
    assert (shelf / "alpha" / "manifest.json").read_bytes() == before
    assert refused(home, shelf, "rename", "ghost", "ghost").startswith("no adapter named 'ghost'")
    done = cli(home, "rename", "alpha", "delta")
    assert done.returncode == 0 and out(done).strip() == "Renamed alpha to delta."
    assert json.loads((shelf / "delta" / "manifest.json").read_text())["name"] == "delta"


def test_delete_needs_yes(home, shelf):
    sentence = refused(home, shelf, "delete", "beta")
    assert sentence == "Tick the confirmation box first: add --yes to delete it for good."
    assert refused(home, shelf, "delete", "../beta").startswith("invalid adapter name '../beta'")
    done = cli(home, "delete", "beta", "--yes")
    assert done.returncode == 0 and out(done).strip() == "Deleted beta."
    assert not (shelf / "beta").exists()


def test_export_then_import(home, shelf, tmp_path, tiny_llama_dir):
    ui = handlers(tiny_llama_dir)
    zipped = cli(home, "export", "alpha", "--out", str(tmp_path / "alpha.zip"))
    assert zipped.returncode == 0 and out(zipped).strip() == f"Zipped to {tmp_path / 'alpha.zip'}."
    assert "alpha/adapter_model.safetensors" in zipfile.ZipFile(tmp_path / "alpha.zip").namelist()
    assert refused(home, shelf, "export", "ghost").startswith("no adapter named 'ghost'")
    merged = cli(home, "export", "alpha", "--merged", "--out", str(tmp_path / "merged"))
    assert merged.returncode == 0 and (tmp_path / "merged" / "config.json").is_file()
    done = cli(home, "import", str(tmp_path / "alpha.zip"), "--name", "epsilon")
    assert done.returncode == 0 and out(done).strip() == "Imported epsilon."
    assert json.loads(out(cli(home, "show", "epsilon", "--json")))["status"] == "ok"
    (tmp_path / "notes.zip").write_text("not a zip at all")
    bad = refused(home, shelf, "import", str(tmp_path / "notes.zip"))
    assert bad.startswith("Import refused:")
    # the tab names the upload as the user named it, the CLI the path given
    named = bad.replace(str(tmp_path / "notes.zip"), "notes.zip")
    assert ui["on_import"](str(tmp_path / "notes.zip"), "")[0] == f"⚠️ {named}"
    again = refused(home, shelf, "import", str(tmp_path / "alpha.zip"), "--name", "epsilon")
    assert again == "Import refused: an adapter named 'epsilon' already exists; pick another name"


def test_an_adapter_an_alias_sends_traffic_to_is_neither_renamed_nor_deleted(
    home, shelf, tiny_llama_dir
):
    """Renamed or deleted, its alias's API clients got a 404 and whoever did it no word."""
    from adapters.shelf.aliases import AliasBook
    from adapters.shelf.store import Shelf

    book = AliasBook(Shelf())
    book.set("support-bot", {"alpha": 90, "beta": 10}, by="ana", force=True, reason="test")
    ui = handlers(tiny_llama_dir)
    renamed = refused(home, shelf, "rename", "alpha", "delta")
    assert renamed.startswith("alpha takes traffic through the alias(es) 'support-bot' (90 %)")
    from ui.views.wording import for_ui

    said = ui["on_rename"]("alpha", "delta")[0]  # the same sentence, naming the tab's controls
    assert said == f"⚠️ {for_ui(renamed)}" and "press **Set split**" in said
    deleted = refused(home, shelf, "delete", "beta", "--yes")
    assert "'support-bot' (10 %)" in deleted and deleted.endswith("then go on deleting it")
    book.set("support-bot", {"alpha": 100, "beta": 0}, by="ana", force=True, reason="test")
    done = cli(home, "delete", "beta", "--yes")  # kept at 0 for a rollback: it may go
    assert done.returncode == 0 and not (shelf / "beta").exists()
