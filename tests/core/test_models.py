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
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi, where is my order?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
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
    threads = [threading.Thread(target=lambda: results.append(models.resolve("default"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(calls) == 1
    assert {r.path for r in results} == {models.cache_dir_for(models.DEFAULT_MODEL)}
    leftovers = [p.name for p in models.cache_dir_for("x").parent.iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []
