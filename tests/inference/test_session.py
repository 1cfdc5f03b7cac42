"""ModelSession: lazy base loading, adapters by name, LRU unloading, guards, status."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from core import models
from core.hashing import file_hash
from inference.generate import GenerationSettings, compare
from inference.session import AdapterMismatchError, ModelSession, physical_cores, pick_dtype

MSGS = [{"role": "user", "content": "Where is my order?"}]
GREEDY = GenerationSettings(max_new_tokens=12)


def make_adapter(home, base_dir, name, seed, weight_hash=None, base_name=None):
    """Save a seeded random LoRA adapter plus manifest on the shelf of ``home``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), config)
    with torch.no_grad():
        for pname, param in model.named_parameters():
            if "lora_" in pname:
                param.normal_(0, 0.3)
    folder = home / "adapters" / name
    model.save_pretrained(folder)
    weight_hash = weight_hash or models.resolve(str(base_dir)).weight_hash
    manifest = {
        "format": "tunedesk-adapter/1",
        "name": name,
        "adapter_hash": file_hash(folder / "adapter_model.safetensors"),
        "base_model": {
            "name": base_name or str(base_dir),
            "weight_hash": weight_hash,
            "architecture": "llama",
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def shelf(home, varied_dir):
    for seed, name in enumerate(["a", "b", "c"], start=1):
        make_adapter(home, varied_dir, name, seed)
    return home / "adapters"


@pytest.fixture
def session(shelf, varied_dir):
    return ModelSession(str(varied_dir), max_loaded_adapters=4, dtype="float32")


def answer(session, adapter):
    return compare(session, MSGS, [adapter], GREEDY)[0].text


def test_status_goes_from_not_loaded_to_ready_in_the_background(session):
    assert session.status()["state"] == "not loaded"
    session.load(wait=False)
    deadline = time.time() + 30
    while session.status()["state"] != "ready" and time.time() < deadline:
        time.sleep(0.01)
    status = session.status()
    assert status["state"] == "ready" and status["error"] is None
    assert status["load_seconds"] > 0 and status["adapters"] == [] and status["active"] is None


def test_bad_base_reports_error_state(home):
    session = ModelSession(str(home / "no-such-model"))
    with pytest.raises(models.ModelNotFoundError):
        session.load()
    assert session.status()["state"] == "error" and "no-such-model" in session.status()["error"]


def test_switching_never_reloads_the_base(session):
    base_before = session.base_model
    session.load_adapter("a")  # wraps the base in a PeftModel, in place
    first = id(session.base_model)
    assert session.base_model is base_before
    for name in ["b", "a", None, "c", "a"]:
        session.activate(name)
        assert session.status()["active"] == name
    assert id(session.base_model) == first
    assert session.loaded_adapters == ["b", "c", "a"] and len(session.model.peft_config) == 3


def test_least_recently_used_adapter_is_unloaded(shelf, varied_dir):
    session = ModelSession(str(varied_dir), max_loaded_adapters=2, dtype="float32")
    b_alone = answer(session, "b")
    session.load_adapter("a")
    session.activate("b")  # b is now the most recent
    session.load_adapter("c")  # evicts a
    assert session.loaded_adapters == ["b", "c"]
    assert len(session.model.peft_config) == 2
    assert answer(session, "a") != b_alone  # a comes back on demand, evicting b
    assert session.loaded_adapters == ["c", "a"]
    assert answer(session, "b") == b_alone


def test_adapter_for_another_base_is_refused(home, session, varied_dir):
    make_adapter(home, varied_dir, "alien", 9, weight_hash="0" * 16, base_name="acme/other-model")
    with pytest.raises(AdapterMismatchError) as info:
        session.load_adapter("alien")
    msg = str(info.value)
    assert "alien" in msg and "acme/other-model" in msg and str(varied_dir) in msg
    assert session.loaded_adapters == []


def test_corrupt_adapter_is_named_and_others_keep_working(home, session):
    before = answer(session, None)
    broken = home / "adapters" / "broken"
    shutil.copytree(home / "adapters" / "a", broken)
    (broken / "adapter_model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="'broken'.*safetensors"):
        session.load_adapter("broken")
    assert answer(session, None) == before
    session.load_adapter("b")
    assert session.loaded_adapters == ["b"]


def test_failed_first_load_leaves_the_base_untouched(home, session):
    before = answer(session, None)
    bad = home / "adapters" / "bad-shapes"
    shutil.copytree(home / "adapters" / "a", bad)
    config = json.loads((bad / "adapter_config.json").read_text())
    # the weights hold rank 4 (a rank pattern is past the shelf's rank check, which reads r):
    # loading fails after the layers were injected
    config["rank_pattern"] = {"o_proj": 8, "q_proj": 8, "v_proj": 8, "k_proj": 8}
    (bad / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="'bad-shapes' could not be loaded"):
        session.load_adapter("bad-shapes")
    assert not hasattr(session.model, "peft_config")
    assert answer(session, None) == before
    assert answer(session, "a") != before


def test_an_adapter_without_a_manifest_the_shelf_lists_ok_is_served(home, session):
    """A plain PEFT folder on the shelf (no manifest.json) lists ok, built from its config, so
    the session answers from it too (it said "manifest.json cannot be read as JSON")."""
    from adapters.shelf.store import Shelf

    plain = home / "adapters" / "plain"
    shutil.copytree(home / "adapters" / "a", plain)
    (plain / "manifest.json").unlink()
    assert Shelf().get("plain").ok
    assert answer(session, "plain") == answer(session, "a") != answer(session, None)


def test_pickle_weights_and_bad_names_are_refused(home, session):
    folder = home / "adapters" / "pickled"
    shutil.copytree(home / "adapters" / "a", folder)
    (folder / "adapter_model.safetensors").rename(folder / "adapter_model.bin")
    with pytest.raises(ValueError, match="pickle"):
        session.load_adapter("pickled")
    for bad in ["../a", "a/b", ".hidden"]:
        with pytest.raises(ValueError, match="invalid adapter name"):
            session.load_adapter(bad)
    with pytest.raises(ValueError, match="no adapter named 'ghost'"):
        session.load_adapter("ghost")


def test_retrained_adapter_is_reloaded(home, session, varied_dir):
    old = answer(session, "a")
    shutil.rmtree(home / "adapters" / "a")
    make_adapter(home, varied_dir, "a", 42)
    assert session.adapter_hash("a") == file_hash(
        home / "adapters" / "a" / "adapter_model.safetensors"
    )
    assert answer(session, "a") != old


def test_use_sets_the_model_for_forward_passes(session):
    ids = session.tokenizer("Where is my invoice?", return_tensors="pt")
    with torch.inference_mode():
        base = session.model(**ids).logits
        with session.use("a") as model:
            tuned = model(**ids).logits
        with session.use(None) as model:
            again = model(**ids).logits
    assert not torch.allclose(base, tuned)
    assert torch.equal(base, again)
    session.unload_adapter("a")  # the last one: the model is unwrapped to the same base
    assert session.loaded_adapters == [] and not hasattr(session.model, "peft_config")
    with torch.inference_mode():
        assert torch.equal(session.model(**ids).logits, base)


def test_threads_and_dtype_choices():
    assert 1 <= physical_cores() <= (__import__("os").cpu_count() or 1)
    assert pick_dtype("float32", "cpu") == "float32"
    assert pick_dtype("auto", "cpu") in ("float32", "bfloat16")
    with pytest.raises(ValueError, match="dtype"):
        pick_dtype("int3", "cpu")


def test_weights_missing_tensors_are_refused(home, session):
    from safetensors.torch import load_file, save_file

    session.load_adapter("a")
    partial = home / "adapters" / "partial"
    shutil.copytree(home / "adapters" / "b", partial)
    tensors = load_file(partial / "adapter_model.safetensors")
    save_file(dict(list(tensors.items())[:2]), partial / "adapter_model.safetensors")
    manifest = json.loads((partial / "manifest.json").read_text())  # a whole file, just short
    manifest["adapter_hash"] = file_hash(partial / "adapter_model.safetensors")
    (partial / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="'partial'.*lacks"):
        session.load_adapter("partial")
    assert session.loaded_adapters == ["a"] and len(session.model.peft_config) == 1


def test_failed_generate_leaves_no_adapter_hooks_behind(session):
    inputs = session.tokenizer(["Where is my invoice?"], return_tensors="pt")
    with pytest.raises(ValueError):
        session.generate(inputs, ["a"], max_new_tokens=-1)  # refused inside PEFT's hook context
    leftovers = [
        m
        for m in session.model.modules()
        if any("adapter_names" in getattr(h, "keywords", {}) for h in m._forward_pre_hooks.values())
    ]
    assert leftovers == []
    assert answer(session, None) == answer(session, "__base__")
