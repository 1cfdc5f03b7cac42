"""llama-server's decode speed for one catalog model: random weights of its real shape, converted
to Q8_0 by llama.cpp's own converter, one client, greedy, a fixed number of tokens.

The folder the converter reads holds the random weights (bf16: the converter quantizes them to
Q8_0 itself) and the default model's tokenizer, its vocabulary padded with unreachable
placeholder tokens up to the config's ``vocab_size``: the embedding and the output layer keep
their real size (Gemma 3's converter cuts the embedding to the tokenizer's vocabulary, so the
tokenizer must be as large as the real one), while text still tokenizes as SmolLM2's BPE, which
llama.cpp's converter recognises.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

# One client, greedy, as bench.llama_repack measures: the first request warms up, the rest count.
DECODE_TOKENS = 64
DECODE_RUNS = 3


def random_model_folder(config_values: dict, folder: Path) -> Path:
    """Save a random-weight model of ``config_values`` (a config.json dict) with a
    padded tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from core.models import resolve

    values = dict(config_values)
    config = AutoConfig.for_model(
        values.pop("model_type"), **{k: v for k, v in values.items() if k != "architectures"}
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    AutoTokenizer.from_pretrained(resolve("default").path).save_pretrained(folder)
    pad_vocabulary(folder / "tokenizer.json", config.vocab_size)
    return folder


def pad_vocabulary(path: Path, size: int) -> int:
    """Add placeholder tokens to a BPE ``tokenizer.json`` until ids 0..size-1 all exist; returns
    how many were added. No merge leads to them, so no text ever tokenizes into one."""
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    added = 0
    for i in range(size):
        if i not in taken:
            vocab[f"<|unused_{i}|>"] = i
            added += 1
    path.write_text(json.dumps(data, ensure_ascii=False))
    return added


def serving_cost(
    config_values: dict, work: Path, tokens: int = DECODE_TOKENS, runs: int = DECODE_RUNS
) -> dict:
    """``{"decode_tokens_per_s", "gguf_mib", "convert_s", ...}`` or ``{"error": sentence}``."""
    from adapters.export.gguf_cache import convert_model
    from adapters.export.llama_tools import LlamaToolsError
    from bench.llama_repack import decode_speeds
    from core.llama_cpp.binaries import missing_reason, server_binary

    binary = server_binary()
    if binary is None:
        return {"error": f"no llama-server: {missing_reason('llama-server')}"}
    folder, gguf = work / "hf", work / "model-q8_0.gguf"
    t0 = time.perf_counter()
    try:
        random_model_folder(config_values, folder)
        convert_model(folder, gguf, "q8_0")
    except (LlamaToolsError, OSError, ValueError, RuntimeError) as err:
        return {"error": f"conversion failed: {str(err)[:300]}"}
    convert_s = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".log", dir=work, delete=False) as log:
        result = decode_speeds(binary, gguf, [], tokens, runs, None, Path(log.name))
    if "error" in result:
        tail = Path(log.name).read_text(errors="replace").strip().splitlines()[-2:]
        return {"error": f"llama-server {result['error']}: {' | '.join(tail)[:300]}"}
    return {
        "decode_tokens_per_s": result["median"],
        "runs_tokens_per_s": result["tok_s"],
        "tokens": tokens,
        "gguf_mib": gguf.stat().st_size / 2**20,
        "convert_s": convert_s,
    }
