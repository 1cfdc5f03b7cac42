"""Hostile names, links and weight files: a bad adapter name at every entry point, links out of
the home and pickle weights are refused with a clear message; nothing runs, and nothing inside
or outside ``$TUNEDESK_HOME`` changes. (Uploads: test_hostile_uploads.py; generation settings:
test_hostile_generation_settings.py; fuzzing: test_fuzz.py.)

Covered elsewhere, not repeated here: hostile adapter zips (tests/adapters/test_export.py), bad
names and symlinked adapter folders on the shelf (tests/adapters/test_store.py).
Counts of what was tried land in test-artifacts/hostile_inputs.json (see tally.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from reliability_fixtures import write_tallies  # noqa: F401 (fixtures)
from run_helpers import tiny_run_config
from tally import HOSTILE

from adapters.shelf.store import PICKLE_REASON, Shelf, file_hash
from core import models
from finetune.config import validate
from inference.session import ModelSession

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def session(tiny_llama_dir, home):
    return ModelSession(str(tiny_llama_dir), dtype="float32")


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


# --- names, paths and links -------------------------------------------------------------------

BAD_NAMES = [
    "../x",
    "../../etc/passwd",
    "/etc/passwd",
    "..",
    ".",
    "a/b",
    "a\\b",
    ".hidden",
    "x" * 65,
    "ok\n",
    "nul\x00x",
    "~root",
    "$(touch pwned)",
    "C:\\evil",
    "..%2f..%2fx",
]


def shelve(peft_dir: Path, base_dir: Path, name: str) -> Path:
    folder = Shelf().root / name
    shutil.copytree(peft_dir, folder)
    manifest = {
        "format": "tunedesk-adapter/1",
        "name": name,
        "base_model": {
            "name": str(base_dir),
            "weight_hash": models.resolve(str(base_dir)).weight_hash,
        },
        "adapter_hash": file_hash(folder / "adapter_model.safetensors"),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_hostile_names_are_refused_at_every_entry_point(
    home, tmp_path, random_lora_dir, tiny_llama_dir, session
):
    from adapters.export import export_merged, export_zip, import_adapter
    from eval.run import evaluate
    from finetune.train import runner

    shelve(random_lora_dir, tiny_llama_dir, "good")
    before, outside = _files(home), _files(tmp_path) - {f"home/{p}" for p in _files(home)}
    shelf = Shelf()
    entry_points = {
        "shelf.get": lambda n: shelf.get(n),
        "shelf.delete": lambda n: shelf.delete(n),
        "shelf.rename from": lambda n: shelf.rename(n, "fine"),
        "shelf.rename to": lambda n: shelf.rename("good", n),
        "shelf.write_manifest_fields": lambda n: shelf.write_manifest_fields(n, {"x": 1}),
        "import name": lambda n: import_adapter(random_lora_dir, name=n),
        "export zip": lambda n: export_zip(n),
        "export merged": lambda n: export_merged(n),
        "session.load_adapter": lambda n: session.load_adapter(n),
        "evaluate": lambda n: evaluate(
            session, [n], str(ROOT / "assets" / "demo_support.jsonl"), max_samples=2, golden=None
        ),
        "runner.get": lambda n: runner.get(n),
        "runner.stop": lambda n: runner.stop(n),
    }
    for label, call in entry_points.items():
        for name in BAD_NAMES:
            with pytest.raises(ValueError, match="invalid|refused|outside|no adapter") as info:
                call(name)
                pytest.fail(f"{label} accepted {name!r}")
            assert "\n" not in str(info.value).replace(repr(name), ""), (label, name)
            HOSTILE.add("hostile names", label)
    cfg = tiny_run_config(tiny_llama_dir)
    for name in BAD_NAMES:
        cfg.run.adapter_name = name
        assert any("invalid adapter name" in p for p in validate(cfg)), name
        HOSTILE.add("hostile names", "training config")

    assert _files(home) == before and shelf.get("good").ok
    assert _files(tmp_path) - {f"home/{p}" for p in _files(home)} == outside
    assert not Path("pwned").exists()


def test_links_out_of_the_home_are_not_followed(
    home, tmp_path, random_lora_dir, tiny_llama_dir, session
):
    from adapters.export import export_zip, import_adapter

    outside = tmp_path / "outside"
    shutil.copytree(random_lora_dir, outside)
    (home / "adapters").mkdir(parents=True)
    (home / "adapters" / "linked").symlink_to(outside, target_is_directory=True)
    inner = shelve(random_lora_dir, tiny_llama_dir, "inner-link")
    (inner / "adapter_model.safetensors").unlink()
    (inner / "adapter_model.safetensors").symlink_to(outside / "adapter_model.safetensors")
    smuggler = tmp_path / "smuggler"  # an import source whose files are links to secrets
    smuggler.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"secret")
    for f in random_lora_dir.iterdir():
        (smuggler / f.name).symlink_to(tmp_path / "secret.bin" if f.suffix == ".safetensors" else f)

    entries = {e.name: e for e in Shelf().list()}
    assert "points outside" in entries["linked"].reason
    assert "points outside" in entries["inner-link"].reason
    for name in ("linked", "inner-link"):
        with pytest.raises(ValueError, match="outside"):
            session.load_adapter(name)
        with pytest.raises(ValueError, match="outside"):
            export_zip(name) if name == "linked" else Shelf().base_of(name)
    with pytest.raises(ValueError, match="not a usable LoRA adapter: .* is missing"):
        import_adapter(smuggler, name="smuggled")
    assert not (home / "adapters" / "smuggled").exists() and _files(home / "exports") == set()
    for case in ("linked adapter folder", "linked weights file", "import of linked files"):
        HOSTILE.add("links out of the home", case)


def test_pickle_weights_never_run(home, tmp_path, random_lora_dir, tiny_llama_dir, session):
    import torch

    from adapters.export import import_adapter

    marker = tmp_path / "pickle-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))  # unpickling would create the marker file

    evil = tmp_path / "evil"
    shutil.copytree(random_lora_dir, evil)
    (evil / "adapter_model.safetensors").unlink()
    torch.save({"base_model.model.lora_A": Payload()}, evil / "adapter_model.bin")
    shutil.copytree(evil, home / "adapters" / "evil")

    assert Shelf().get("evil").reason == PICKLE_REASON
    with pytest.raises(ValueError, match=re.escape(f"adapter 'evil' is broken: {PICKLE_REASON}")):
        session.load_adapter("evil")  # the shelf's own reason
    with pytest.raises(ValueError, match="pickle weights"):
        import_adapter(evil, name="evil-import")
    with pytest.raises(ValueError, match="could not be read safely"):
        import_adapter(evil, name="evil-import", allow_pickle=True)  # opted in: weights_only load
    assert not marker.exists() and not (home / "adapters" / "evil-import").exists()
    for case in ("listed", "session load", "import", "import with allow_pickle"):
        HOSTILE.add("pickle weights", case)
