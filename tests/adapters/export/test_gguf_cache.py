"""ensure_base_gguf / ensure_lora_gguf: llama.cpp's converter on tiny models, checked in llama.cpp."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_run import last_logits, llama_or_skip, load
from shelf_helpers import put_adapter

from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
from adapters.shelf.store import Shelf
from core import models

TEXT = "Where is my invoice? Your invoice is in your account under Orders."


def torch_logits(model_dir, ids, adapter_dir=None):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    with torch.no_grad():
        return model.eval()(torch.tensor([ids])).logits[0, -1].numpy()


def relative_gap(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_tiny_models_convert_and_run_in_llama_cpp(home, tiny_real_tok, arch):
    from transformers import AutoTokenizer

    llama_or_skip()
    folder = tiny_real_tok(arch)
    lines = []
    path = ensure_base_gguf(str(folder), "f16", on_progress=lambda f, m: lines.append((f, m)))
    resolved = models.resolve(str(folder))
    assert path.is_file() and resolved.weight_hash in str(path) and path.parent.parent == home / "exports" / "gguf" / "base"
    assert any("successfully exported" in m for _, m in lines)
    assert any(0 < f <= 1 for f, _ in lines)  # tqdm's percentages came through
    llm = load(path)
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=True)
    if arch != "qwen2":  # the same tokenizer in the file as in transformers
        assert AutoTokenizer.from_pretrained(folder)(TEXT).input_ids == ids
    got, want = last_logits(llm, ids), torch_logits(folder, ids)
    # F16 weights: measured gaps are ~1e-3 of the largest logit.
    assert relative_gap(got, want) < 1e-2 and got.argmax() == want.argmax()
    mtime = path.stat().st_mtime_ns
    assert ensure_base_gguf(resolved, "F16") == path and path.stat().st_mtime_ns == mtime  # cached
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith(".lock")] == ["model-f16.gguf"]


def test_quantized_base_comes_from_llama_cpps_quantizer(home, tiny_real_tok):
    llama_or_skip()
    folder = tiny_real_tok("llama")
    lines = []
    q4 = ensure_base_gguf(str(folder), "q4_k_m", on_progress=lambda f, m: lines.append(m))
    assert q4.name == "model-q4_k_m.gguf" and (q4.parent / "model-f16.gguf").is_file()
    assert any("q4_K" in m or "q5_0" in m or "q8_0" in m for m in lines)  # llama.cpp's tensor log
    assert 0 < q4.stat().st_size < (q4.parent / "model-f16.gguf").stat().st_size
    assert load(q4).n_vocab() > 0


def test_lora_gguf_applied_in_llama_cpp_matches_peft(home, tiny_real_tok):
    from transformers import AutoTokenizer

    llama_or_skip()
    folder = tiny_real_tok("llama")
    entry = put_adapter(folder, "tuned")
    lora = ensure_lora_gguf("tuned")
    assert lora.parent.name == json.loads((entry.path / "manifest.json").read_text())["adapter_hash"]
    ids = AutoTokenizer.from_pretrained(folder)(TEXT).input_ids
    base = ensure_base_gguf(str(folder), "f32")
    got = last_logits(load(base, lora=lora), ids)
    want, plain = torch_logits(folder, ids, entry.path), torch_logits(folder, ids)
    assert relative_gap(got, want) < 1e-2 < relative_gap(plain, want)  # the adapter really acts
    Shelf().rename("tuned", "renamed")
    assert ensure_lora_gguf("renamed") == lora  # same weights: converted once


def test_bad_adapters_are_refused_in_a_sentence(home, tiny_real_tok, tiny_llama_dir):
    folder = tiny_real_tok("llama")
    put_adapter(folder, "dora", dora=True)
    with pytest.raises(ValueError, match="DoRA adapter"):
        ensure_lora_gguf("dora")
    put_adapter(folder, "broken")
    (Shelf().path("broken") / "adapter_config.json").write_text("{")
    with pytest.raises(ValueError, match="broken: .*adapter_config.json"):
        ensure_lora_gguf("broken")
    put_adapter(folder, "other")
    Shelf().write_manifest_fields("other", {"base_model": {"weight_hash": "0123456789abcdef"}})
    with pytest.raises(ValueError, match="was trained on base model"):
        ensure_lora_gguf("other")
    with pytest.raises(ValueError, match="no adapter named"):
        ensure_lora_gguf("missing")
    with pytest.raises(ValueError, match="unknown GGUF type 'q3'"):
        ensure_base_gguf(str(folder), "q3")
    assert not (home / "exports" / "gguf" / "lora").exists()


def test_unknown_architecture_gets_the_converters_sentence(home, tiny_real_tok, tmp_path):
    import shutil

    from adapters.export.llama_tools import LlamaToolsError

    src = tiny_real_tok("llama")
    folder = tmp_path / "odd-model"
    shutil.copytree(src, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["MadeUpForCausalLM"]}))
    with pytest.raises(LlamaToolsError, match="MadeUpForCausalLM.* not supported"):
        ensure_base_gguf(str(folder), "f16")
    assert [p.name for p in (home / "exports" / "gguf" / "base").rglob("*") if p.is_file()
            and not p.name.startswith(".lock")] == []


def test_q8_0_decodes_through_open_model_and_amx_repacking_is_off_where_it_crashes(home, tiny_real_tok,
                                                                                   monkeypatch):
    # llama.cpp's AMX matmul segfaults decoding Q8_0 (seen on the real SmolLM2 here, an Intel
    # Xeon with amx_int8): open_model loads without the extra buffer types on such CPUs.
    from adapters.export import llama_tools

    llama_or_skip()
    q8 = ensure_base_gguf(str(tiny_real_tok("llama")), "q8_0")
    llm = llama_tools.open_model(q8, n_ctx=64, n_threads=2, verbose=False)
    assert llm.model_params.use_extra_bufts is (not llama_tools.amx_cpu())
    first = last_logits(llm, [1, 2, 3, 4])
    assert np.isfinite(first).all()
    monkeypatch.setattr(llama_tools, "amx_cpu", lambda: True)  # what an AMX CPU gets, anywhere
    plain = llama_tools.open_model(q8, n_ctx=64, n_threads=2, verbose=False)
    assert plain.model_params.use_extra_bufts is False
    np.testing.assert_allclose(last_logits(plain, [1, 2, 3, 4]), first, rtol=1e-3, atol=1e-3)
    import llama_cpp

    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts  # restored after
