"""ensure_base_gguf / ensure_lora_gguf: llama.cpp's converter on tiny models,
checked in llama.cpp."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_run import llama_or_skip, logprob_gap, served
from shelf_helpers import put_adapter

from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
from adapters.shelf.store import Shelf
from core import models
from core.llama_cpp import one_shot, process

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


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_tiny_models_convert_and_run_in_llama_cpp(home, tiny_real_tok, arch):
    from transformers import AutoTokenizer

    llama_or_skip()
    folder = tiny_real_tok(arch)
    lines = []
    path = ensure_base_gguf(str(folder), "f16", on_progress=lambda f, m: lines.append((f, m)))
    resolved = models.resolve(str(folder))
    assert (
        path.is_file()
        and resolved.weight_hash in str(path)
        and path.parent.parent == home / "exports" / "gguf" / "base"
    )
    assert any("successfully exported" in m for _, m in lines)
    assert any(0 < f <= 1 for f, _ in lines)  # tqdm's percentages came through
    with served(path) as server:
        ids = one_shot.tokenize(server, TEXT)
        if arch != "qwen2":  # the same tokenizer in the file as in transformers
            assert AutoTokenizer.from_pretrained(folder)(TEXT).input_ids == ids
        gap, same_first = logprob_gap(server, ids, torch_logits(folder, ids))
    # F16 weights: measured gaps were 2e-3 to 8e-3 in log-probability (llama, qwen2, gpt2).
    assert gap < 2e-2 and same_first
    mtime = path.stat().st_mtime_ns
    assert ensure_base_gguf(resolved, "F16") == path and path.stat().st_mtime_ns == mtime  # cached
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith(".lock")] == [
        "model-f16.gguf"
    ]


def test_quantized_base_comes_from_llama_cpps_quantizer(home, tiny_real_tok):
    llama_or_skip()
    folder = tiny_real_tok("llama")
    lines = []
    q4 = ensure_base_gguf(str(folder), "q4_k_m", on_progress=lambda f, m: lines.append(m))
    assert q4.name == "model-q4_k_m.gguf" and (q4.parent / "model-f16.gguf").is_file()
    assert any("q4_K" in m or "q5_0" in m or "q8_0" in m for m in lines)  # llama.cpp's tensor log
    assert 0 < q4.stat().st_size < (q4.parent / "model-f16.gguf").stat().st_size
    with served(q4) as server:
        assert len(one_shot.top_logprobs(server, [1, 2, 3], 5)) == 5  # llama.cpp decodes it


def test_lora_gguf_applied_in_llama_cpp_matches_peft(home, tiny_real_tok):
    from transformers import AutoTokenizer

    llama_or_skip()
    folder = tiny_real_tok("llama")
    entry = put_adapter(folder, "tuned")
    lora = ensure_lora_gguf("tuned")
    assert (
        lora.parent.name == json.loads((entry.path / "manifest.json").read_text())["adapter_hash"]
    )
    ids = AutoTokenizer.from_pretrained(folder)(TEXT).input_ids
    base = ensure_base_gguf(str(folder), "f32")
    want, plain = torch_logits(folder, ids, entry.path), torch_logits(folder, ids)
    with served(base, lora=lora) as server:
        (gap, same_first), (gap_plain, _) = (
            logprob_gap(server, ids, want),
            logprob_gap(server, ids, plain),
        )
    assert gap < 1e-2 < gap_plain and same_first  # measured 2e-3 and 1.7: the adapter really acts
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
    (folder / "config.json").write_text(
        json.dumps({**config, "architectures": ["MadeUpForCausalLM"]})
    )
    with pytest.raises(LlamaToolsError, match="MadeUpForCausalLM.* not supported"):
        ensure_base_gguf(str(folder), "f16")
    assert [
        p.name
        for p in (home / "exports" / "gguf" / "base").rglob("*")
        if p.is_file() and not p.name.startswith(".lock")
    ] == []


def test_q8_0_decodes_with_and_without_repacking(home, tiny_real_tok, monkeypatch, tmp_path):
    # On an AMX CPU the first start checks llama.cpp's repacking (tests/core/test_repack_check.py);
    # with --no-repack the same file gives the same next-token log-probabilities.
    binary = llama_or_skip()
    monkeypatch.delenv("TUNEDESK_LLAMA_AMX", raising=False)  # a run that forces the fallback
    q8 = ensure_base_gguf(str(tiny_real_tok("llama")), "q8_0")
    with served(q8) as server:
        first = one_shot.top_logprobs(server, [1, 2, 3, 4], 10)
    assert all(np.isfinite(v) for v in first.values())
    monkeypatch.setattr(process, "amx_cpu", lambda: True)
    monkeypatch.setenv("TUNEDESK_LLAMA_AMX", "0")
    plain = process.LlamaServerProcess(
        binary, q8, [], slots=1, ctx_per_slot=64, log=tmp_path / "log"
    )
    assert "--no-repack" in plain.command()
    with plain:
        again = one_shot.top_logprobs(plain, [1, 2, 3, 4], 10)
    assert again.keys() == first.keys()
    np.testing.assert_allclose(list(again.values()), list(first.values()), atol=1e-3)
    monkeypatch.setenv("TUNEDESK_LLAMA_AMX", "1")
    assert (
        "--no-repack"
        not in process.LlamaServerProcess(binary, q8, [], log=tmp_path / "log").command()
    )
