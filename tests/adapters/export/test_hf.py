"""Importing adapters (folders, hostile zips, pickles) and exporting them (zip, merged model)."""

from __future__ import annotations

import json
import shutil
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from adapters.export import ZipLimits, export_merged, export_zip, import_adapter, sanitize_name
from adapters.shelf.store import PICKLE_REASON, Shelf, file_hash


@pytest.fixture(scope="session")
def peft_dir(random_lora_dir, tmp_path_factory) -> Path:
    """The shared LoRA adapter, in a folder whose name needs sanitizing (no manifest)."""
    import shutil

    folder = tmp_path_factory.mktemp("peft-named") / "My adapter (v2)"
    shutil.copytree(random_lora_dir, folder)
    return folder


def adapter_zip(peft_dir: Path, out: Path, extra=None) -> Path:
    """Zip the adapter files at the zip's root, then let ``extra(zf)`` add a member."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in peft_dir.iterdir():
            zf.write(f, f.name)
        if extra:
            extra(zf)
    return out


def add_symlink(zf: zipfile.ZipFile) -> None:
    info = zipfile.ZipInfo("link")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    zf.writestr(info, "/etc/passwd")


HOSTILE = {
    "dotdot": (lambda zf: zf.writestr("../evil", "x"), {}, "climbs out"),
    "absolute": (lambda zf: zf.writestr("/tmp/evil-abs", "x"), {}, "absolute"),
    "symlink": (add_symlink, {}, "symlink"),
    "too-big": (
        lambda zf: zf.writestr("pad.txt", b"0" * 300_000),
        {"max_total_bytes": 200_000},
        "limit",
    ),
    "ratio-bomb": (lambda zf: zf.writestr("pad.txt", b"\0" * 3_000_000), {}, "zip bomb"),
    "many": (lambda zf: [zf.writestr(f"f{i}.txt", "x") for i in range(100)], {}, "members"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_zips_are_refused_and_leave_nothing(home, tmp_path, peft_dir, kind):
    extra, limits, message = HOSTILE[kind]
    archive = adapter_zip(peft_dir, tmp_path / "evil.zip", extra)

    with pytest.raises(ValueError, match=message):
        import_adapter(archive, limits=ZipLimits(**limits))

    assert list(Shelf().root.iterdir()) == []  # no adapter, no leftover staging folder
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil-abs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip", "home"]


def test_zip_whose_headers_understate_sizes_is_refused(home, tmp_path, peft_dir):
    archive = tmp_path / "liar.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pad.txt", "x" * 5000)  # first member: its headers are the first found
        for f in peft_dir.iterdir():
            zf.write(f, f.name)
    data = bytearray(archive.read_bytes())
    struct.pack_into("<I", data, data.find(b"PK\x03\x04") + 22, 100)  # local header
    struct.pack_into("<I", data, data.find(b"PK\x01\x02") + 24, 100)  # central directory
    archive.write_bytes(bytes(data))
    assert zipfile.ZipFile(archive).getinfo("pad.txt").file_size == 100

    with pytest.raises(ValueError, match="could not be unpacked|past its limit"):
        import_adapter(archive)
    assert list(Shelf().root.iterdir()) == []


def test_import_from_a_folder_writes_a_manifest(home, peft_dir, tiny_llama_dir):
    entry = import_adapter(peft_dir)

    assert entry.ok and entry.name == sanitize_name("My adapter (v2)") == "My-adapter-v2-"
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert manifest["imported"] is True and manifest["base_model"]["name"] == str(tiny_llama_dir)
    assert manifest["lora"]["r"] == 4 and manifest["lora"]["target_modules"] == ["q_proj", "v_proj"]
    assert manifest["adapter_hash"] == file_hash(peft_dir / "adapter_model.safetensors")
    assert (entry.path / "README.md").is_file()
    assert import_adapter(peft_dir).name == "My-adapter-v2--2"  # default names never collide
    with pytest.raises(ValueError, match="already exists"):
        import_adapter(peft_dir, name="My-adapter-v2-")


def test_import_from_zips_flat_and_exported(home, tmp_path, peft_dir):
    flat = import_adapter(adapter_zip(peft_dir, tmp_path / "flat.zip"))
    assert flat.ok and flat.name == "flat"
    Shelf().write_manifest_fields("flat", {"metrics": {"bleu": 3.0}})

    archive = export_zip("flat")  # files under flat/ inside the zip

    assert archive == home / "exports" / "flat.zip"
    assert all(n.startswith("flat/") for n in zipfile.ZipFile(archive).namelist())
    copy = import_adapter(archive, name="copy")
    assert copy.ok and copy.manifest["name"] == "copy" and copy.metrics == {"bleu": 3.0}
    assert copy.adapter_hash == flat.adapter_hash


def test_a_zip_without_one_adapter_names_the_zip_and_what_it_holds(home, tmp_path, peft_dir):
    """It named the hidden staging folder ("no adapter_config.json in .tmp-import-k67ywhp2"),
    a path the user never gave and that is gone once the import is refused."""
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as zf:
        for sub in ("a", "b"):
            for f in peft_dir.iterdir():
                zf.write(f, f"{sub}/{f.name}")
    zipfile.ZipFile(tmp_path / "empty.zip", "w").close()
    for archive, said in ((two, "two.zip holds 2 folders (a, b)"), (tmp_path / "empty.zip", "")):
        with pytest.raises(ValueError) as info:
            import_adapter(archive)
        assert f"no adapter_config.json in {archive.name}" in str(info.value)
        assert ".tmp-" not in str(info.value) and said in str(info.value)
    assert [p.name for p in (home / "adapters").iterdir() if not p.name.startswith(".lock")] == []


def test_pickle_weights_need_allow_pickle_and_become_safetensors(home, tmp_path, peft_dir):
    import torch
    from safetensors.torch import load_file

    src = tmp_path / "pickled"
    shutil.copytree(peft_dir, src)
    tensors = load_file(src / "adapter_model.safetensors")
    torch.save(tensors, src / "adapter_model.bin")
    (src / "adapter_model.safetensors").unlink()

    with pytest.raises(ValueError) as info:
        import_adapter(src)
    assert str(info.value) == PICKLE_REASON and list(Shelf().root.iterdir()) == []

    entry = import_adapter(src, allow_pickle=True)
    assert entry.ok and not (entry.path / "adapter_model.bin").exists()
    converted = load_file(entry.path / "adapter_model.safetensors")
    assert all(torch.equal(converted[k], v) for k, v in tensors.items())


def test_a_path_that_is_not_there_is_said_to_be_missing(home, tmp_path, capsys):
    """It said '/nope is neither an adapter folder nor a zip file', as for a text file."""
    from adapters.__main__ import main

    missing = tmp_path / "my-adapter"
    assert main(["import", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: Import refused: {missing} does not exist; name an adapter folder (holding "
        "adapter_config.json) or a .zip of one\n"
    )
    assert list(Shelf().root.iterdir()) == []


def test_non_lora_adapter_is_refused(home, tmp_path, peft_dir):
    src = tmp_path / "prefix"
    shutil.copytree(peft_dir, src)
    config = json.loads((src / "adapter_config.json").read_text())
    (src / "adapter_config.json").write_text(json.dumps({**config, "peft_type": "PREFIX_TUNING"}))
    with pytest.raises(ValueError, match="only LORA"):
        import_adapter(src)
    assert list(Shelf().root.iterdir()) == []


def test_export_merged_matches_the_peft_model(home, peft_dir, tiny_llama_dir):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import_adapter(peft_dir, name="tuned")
    # The base is found through the manifest's training-time path when its name is gone.
    base_info = {"name": "acme/missing-model", "path": str(tiny_llama_dir)}
    Shelf().write_manifest_fields("tuned", {"base_model": base_info})

    out = export_merged("tuned")

    assert out == home / "exports" / "tuned-merged"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()
    ids = AutoTokenizer.from_pretrained(out)("Where is my invoice?", return_tensors="pt").input_ids
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    peft = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir), Shelf().path("tuned")
    ).eval()
    with torch.no_grad():
        want, got = peft(ids).logits, merged(ids).logits
        base = peft.get_base_model()
        with peft.disable_adapter():
            plain = base(ids).logits
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, plain, atol=1e-3)
    assert all(torch.isfinite(p).all() for p in merged.state_dict().values())
    info = json.loads((out / "tunedesk_export.json").read_text())
    assert info["adapter"] == "tuned" and info["base_model"]["path"] == str(tiny_llama_dir)
    with pytest.raises(ValueError, match="already exists"):
        export_merged("tuned")
    assert export_merged("tuned", overwrite=True) == out
    assert sorted(p.name for p in out.parent.iterdir()) == ["tuned-merged"]


def test_export_merged_refuses_a_broken_adapter(home, peft_dir):
    import_adapter(peft_dir, name="b")
    (Shelf().path("b") / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(ValueError, match="broken"):
        export_merged("b")


def test_export_zip_refuses_a_broken_adapter(home, peft_dir):
    import_adapter(peft_dir, name="b")
    (Shelf().path("b") / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(ValueError, match="adapter 'b' is broken"):
        export_zip("b")
    assert not (home / "exports" / "b.zip").exists()


def test_exports_never_write_over_the_shelf_or_a_folder_they_did_not_make(home, tmp_path, peft_dir):
    import_adapter(peft_dir, name="a")
    import_adapter(peft_dir, name="victim")
    weights = Shelf().path("victim") / "adapter_model.safetensors"
    before = weights.read_bytes()
    for out in (weights, Shelf().root, Shelf().path("victim"), home):
        with pytest.raises(ValueError, match="on the adapter shelf or holds it"):
            export_zip("a", out)
        with pytest.raises(ValueError, match="on the adapter shelf or holds it"):
            export_merged("a", out, overwrite=True)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a merged model TuneDesk wrote"):
        export_merged("a", precious, overwrite=True)
    with pytest.raises(ValueError, match="is a folder"):
        export_zip("a", precious)
    with pytest.raises(ValueError, match="not a zip"):
        export_zip("a", precious / "notes.txt")
    assert (precious / "notes.txt").read_text() == "keep me"
    assert weights.read_bytes() == before and Shelf().get("victim").ok
    again = export_zip("a", tmp_path / "a.zip")
    assert export_zip("a", again) == again  # its own zip is replaced
