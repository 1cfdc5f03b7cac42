"""Fixtures for the GGUF export tests: tiny models llama.cpp's converter accepts, shelf adapters.

llama.cpp's converter identifies a BPE tokenizer by hashing how it splits a probe text and
refuses ones it does not know -- the byte-level BPE trained in tests/conftest.py among them.
The tiny llama and GPT-2 here therefore carry the default model's real tokenizer (SmolLM2's
49k vocabulary, a pre-tokenizer llama.cpp knows) on 2-layer, 64-wide configs. For Qwen2,
transformers swaps any tokenizer for its own Qwen2Tokenizer (whose splitting then matches no
known hash) and no Qwen2 vocabulary is available offline; llama.cpp's Qwen2 converter reads a
SentencePiece ``tokenizer.model`` first, so the tiny Qwen2 gets one trained here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[3] / "assets" / "demo_support.jsonl"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


@pytest.fixture(scope="session")
def real_tokenizer_dir(default_model_dir, tmp_path_factory) -> Path:
    """The default model's tokenizer files (with its chat template), alone in a folder."""
    folder = tmp_path_factory.mktemp("smollm2-tokenizer")
    for name in TOKENIZER_FILES:
        if (default_model_dir.path / name).is_file():
            shutil.copyfile(default_model_dir.path / name, folder / name)
    return folder


def _sentencepiece_model() -> bytes:
    """A 400-piece SentencePiece BPE model trained on the project's demo support data."""
    import io
    import json

    import sentencepiece as spm

    rows = [json.loads(line) for line in DEMO.read_text().splitlines()[:200]]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([r[k] for r in rows for k in ("instruction", "response")]),
        model_writer=buf,
        vocab_size=400,
        model_type="bpe",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        byte_fallback=True,
        minloglevel=2,
    )
    return buf.getvalue()


def _config(arch: str, tok):
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    if tok is None:  # the SentencePiece model above
        ids = {"bos_token_id": 1, "eos_token_id": 2, "vocab_size": 400}
    else:
        ids = {
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "vocab_size": len(tok),
        }
    if arch == "gpt2":
        # n_ctx: the Hub's GPT-2 configs carry it and llama.cpp's converter reads it.
        return GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=512, n_ctx=512, **ids)
    cls = LlamaConfig if arch == "llama" else Qwen2Config
    return cls(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        **ids,
    )


@pytest.fixture(scope="session")
def tiny_real_tok(real_tokenizer_dir, tmp_path_factory):
    """Build (once per architecture) a tiny model folder with the real tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    built: dict[str, Path] = {}

    def build(arch: str) -> Path:
        if arch not in built:
            folder = tmp_path_factory.mktemp(f"tiny-{arch}-realtok")
            tok = None if arch == "qwen2" else AutoTokenizer.from_pretrained(real_tokenizer_dir)
            if arch == "gpt2":  # no chat template: exercises the fallback prompt format
                tok.chat_template = None
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(_config(arch, tok))
            with torch.no_grad():  # larger weights than the 0.02 init, so answers vary
                for param in model.parameters():
                    if param.dim() == 2:
                        param.normal_(0, 0.15)
            model.save_pretrained(folder)
            if tok is None:
                (folder / "tokenizer.model").write_bytes(_sentencepiece_model())
            else:
                tok.save_pretrained(folder)
            if arch == "gpt2":
                (folder / "chat_template.jinja").unlink(missing_ok=True)
            built[arch] = folder
        return built[arch]

    return build
