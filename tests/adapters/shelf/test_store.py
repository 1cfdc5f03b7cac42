"""The adapter shelf on real PEFT adapters built on the tiny llama model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.shelf.store import PICKLE_REASON, AdapterNotFoundError, Shelf, file_hash

BAD_NAMES = ["../x", "/abs", "a/b", "", "x" * 200, ".hidden", "a\\b", "..", "a..b"]


@pytest.fixture(scope="session")
def peft_dir(random_lora_dir) -> Path:
    return random_lora_dir


def shelve(peft_dir: Path, base: Path, name: str, created: str = "2026-11-21T11:00:00") -> Path:
    """Put a copy of the adapter on the shelf with a manifest like the trainer writes."""
    folder = Shelf().root / name
    shutil.copytree(peft_dir, folder)
    manifest = {
        "format": "tunedesk-adapter/1",
        "name": name,
        "created": created,
        "base_model": {"name": str(base), "architecture": "llama", "weight_hash": "abc"},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "metrics": {"train_loss": 1.2, "val_loss": 1.4},
        "adapter_hash": file_hash(folder / "adapter_model.safetensors"),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_list_shows_adapters_newest_first_with_their_manifests(home, peft_dir, tiny_llama_dir):
    shelve(peft_dir, tiny_llama_dir, "old", created="2026-01-01T00:00:00")
    new = shelve(peft_dir, tiny_llama_dir, "new", created="2026-06-01T00:00:00")
    shutil.copytree(new, Shelf().root / ".tmp-new-abc")  # a crashed save: must stay hidden
    (Shelf().root / "notes.txt").write_text("not an adapter")

    entries = Shelf().list()

    assert [e.name for e in entries] == ["new", "old"]
    entry = entries[0]
    assert entry.ok and entry.reason == ""
    assert entry.base_model == str(tiny_llama_dir) and entry.base_weight_hash == "abc"
    assert entry.lora["r"] == 4 and entry.metrics["val_loss"] == 1.4
    assert entry.adapter_hash == file_hash(new / "adapter_model.safetensors")
    assert entry.size_bytes == sum(f.stat().st_size for f in new.iterdir())
    assert entry.to_dict()["path"] == str(new)


def test_broken_folders_are_listed_with_reasons_and_good_ones_still_load(
    home, peft_dir, tiny_llama_dir
):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    shelve(peft_dir, tiny_llama_dir, "good")
    weights = shelve(peft_dir, tiny_llama_dir, "truncated") / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    (shelve(peft_dir, tiny_llama_dir, "garbage") / "adapter_model.safetensors").write_bytes(b"xx")
    (shelve(peft_dir, tiny_llama_dir, "badmanifest") / "manifest.json").write_text("{not json")
    pickled = shelve(peft_dir, tiny_llama_dir, "pickled")
    torch.save(load_file(pickled / "adapter_model.safetensors"), pickled / "adapter_model.bin")
    (pickled / "adapter_model.safetensors").unlink()
    (shelve(peft_dir, tiny_llama_dir, "noconfig") / "adapter_config.json").unlink()

    entries = {e.name: e for e in Shelf().list()}

    assert entries["good"].ok
    assert "damaged" in entries["truncated"].reason
    assert "damaged" in entries["garbage"].reason
    assert "manifest.json is not valid JSON" in entries["badmanifest"].reason
    assert entries["pickled"].reason == PICKLE_REASON
    assert entries["noconfig"].reason == "adapter_config.json is missing"
    broken = [e for e in entries.values() if e.name != "good"]
    assert all(e.status == "broken" and e.manifest == {} for e in broken)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model = PeftModel.from_pretrained(base, Shelf().path("good"))
    assert "default" in model.peft_config


@pytest.mark.parametrize(
    "change, said",
    [
        ({"r": "abc"}, "r must be a whole number of at least 1, not 'abc'"),
        ({"r": 0}, "r must be a whole number"),
        ({"target_modules": 7}, "target_modules must be a name or a list of names, not '7'"),
        ({"lora_alpha": "high"}, "lora_alpha must be a number"),
        ({"rank_pattern": []}, "rank_pattern must be an object"),
        ({"r": 8}, "holds rank-4 LoRA weights"),
    ],
)
def test_a_config_peft_could_not_load_is_broken_with_its_field_named(
    home, peft_dir, tiny_llama_dir, change, said
):
    folder = shelve(peft_dir, tiny_llama_dir, "bad")
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
    entry = Shelf().get("bad")
    assert not entry.ok and said in entry.reason, entry.reason
    assert entry.reason.startswith("adapter_config.json") or "rank-4" in entry.reason


def test_adapter_without_manifest_lists_from_its_peft_config(home, peft_dir, tiny_llama_dir):
    shutil.copytree(peft_dir, Shelf().root / "plain")
    entry = Shelf().get("plain")
    assert entry.ok and entry.base_model == str(tiny_llama_dir)
    assert entry.lora == {
        "r": 4,
        "alpha": 8,
        "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
    }


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_names_are_refused_everywhere(home, peft_dir, tiny_llama_dir, bad):
    shelve(peft_dir, tiny_llama_dir, "ok")
    shelf = Shelf()
    for call in (
        lambda: shelf.path(bad, must_exist=False),
        lambda: shelf.get(bad),
        lambda: shelf.delete(bad),
        lambda: shelf.rename("ok", bad),
        lambda: shelf.rename(bad, "ok2"),
    ):
        with pytest.raises(ValueError):
            call()
    assert [e.name for e in shelf.list()] == ["ok"]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.one_of(st.text(max_size=80), st.from_regex(r"[A-Za-z0-9./\\_-]{0,70}", fullmatch=True))
)
def test_any_name_is_refused_or_stays_in_the_adapters_folder(home, name):
    shelf = Shelf()
    try:
        folder = shelf.path(name, must_exist=False)
    except ValueError:
        return
    assert folder.parent == shelf.root and folder.name == name
    assert folder.resolve().is_relative_to(shelf.root)


def test_symlink_leaving_the_home_is_refused(home, tmp_path, peft_dir, tiny_llama_dir):
    outside = tmp_path / "outside"
    shutil.copytree(peft_dir, outside)
    (Shelf().root / "linked").symlink_to(outside, target_is_directory=True)

    (entry,) = Shelf().list()
    assert entry.status == "broken" and "outside" in entry.reason
    for call in (Shelf().path, Shelf().get, Shelf().delete, Shelf().base_of):
        with pytest.raises(ValueError, match="outside"):
            call("linked")
    with pytest.raises(ValueError, match="outside"):
        Shelf().rename("linked", "other")
    assert (outside / "adapter_model.safetensors").is_file()


def test_rename_moves_the_folder_and_updates_the_manifest(home, peft_dir, tiny_llama_dir):
    shelve(peft_dir, tiny_llama_dir, "a")
    shelve(peft_dir, tiny_llama_dir, "taken")
    shelf = Shelf()

    entry = shelf.rename("a", "b")

    assert entry.ok and entry.name == "b" and entry.manifest["name"] == "b"
    assert json.loads((shelf.root / "b" / "manifest.json").read_text())["name"] == "b"
    assert not (shelf.root / "a").exists()
    assert shelf.rename("b", "b").name == "b" and shelf.get("b").ok  # its own name: no change
    with pytest.raises(ValueError, match="already exists"):
        shelf.rename("b", "taken")
    assert shelf.get("taken").manifest["name"] == "taken" and shelf.get("b").ok
    with pytest.raises(AdapterNotFoundError):
        shelf.rename("gone", "c")
    assert sorted(p.name for p in shelf.root.iterdir()) == ["b", "taken"]


def test_delete_removes_the_adapter_and_leaves_nothing_behind(home, peft_dir, tiny_llama_dir):
    shelve(peft_dir, tiny_llama_dir, "doomed")
    shelve(peft_dir, tiny_llama_dir, "kept")
    shelf = Shelf()

    shelf.delete("doomed")

    assert [p.name for p in shelf.root.iterdir()] == ["kept"]
    with pytest.raises(AdapterNotFoundError):
        shelf.delete("doomed")


def test_symlink_inside_the_home_is_unlinked_not_followed(home, peft_dir, tiny_llama_dir):
    target = shelve(peft_dir, tiny_llama_dir, "real")
    (Shelf().root / "alias").symlink_to(target, target_is_directory=True)
    Shelf().delete("alias")
    assert not (Shelf().root / "alias").is_symlink() and Shelf().get("real").ok


def test_manifest_write_back_merges_fields(home, peft_dir, tiny_llama_dir):
    folder = shelve(peft_dir, tiny_llama_dir, "m")
    shelf = Shelf()

    shelf.write_manifest_fields("m", {"metrics": {"bleu": 12.5}, "eval": {"id": "e1"}})

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["metrics"] == {"train_loss": 1.2, "val_loss": 1.4, "bleu": 12.5}
    assert manifest["eval"] == {"id": "e1"} and manifest["lora"]["r"] == 4
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []
    with pytest.raises(ValueError, match="cannot be changed"):
        shelf.write_manifest_fields("m", {"name": "other"})
    (folder / "manifest.json").write_text("[]")
    with pytest.raises(ValueError, match="JSON object"):
        shelf.write_manifest_fields("m", {"metrics": {}})


def test_base_of_reports_the_manifest_base(home, peft_dir, tiny_llama_dir):
    shelve(peft_dir, tiny_llama_dir, "x")
    base = Shelf().base_of("x")
    assert base["name"] == str(tiny_llama_dir) and base["weight_hash"] == "abc"
    assert base["architecture"] == "llama" and base["path"] == ""
