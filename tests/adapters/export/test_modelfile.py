"""The Ollama Modelfile: its TEMPLATE, rendered by Go's text/template, gives the chat
template's prompt."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from adapters.export.modelfile import (
    TemplateNotExpressible,
    chat_pieces,
    go_template,
    modelfile,
    probe_conversations,
    stop_tokens,
)
from core.templates import render_prompt

GO_MAIN = Path(__file__).parent / "gotemplate" / "main.go"
QWEN_LIKE = (  # Qwen2.5's shape: a default system block when the conversation has none
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are Qwen.<|im_end|>\n"
    "' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>\n"
    "' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}"
)


def go_render(cases: list[tuple[str, list[dict]]], tmp_path: Path) -> list[str]:
    """Render each (template, messages) with Go's text/template; skip when Go is absent."""
    go = shutil.which("go")
    if go is None:
        pytest.skip(
            "Go is not installed (Debian: apt-get install golang-go); Modelfile TEMPLATE not "
            "rendered"
        )
    payload = json.dumps([{"template": t, "messages": m} for t, m in cases])
    env = {
        "GOCACHE": str(tmp_path / "gocache"),
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "GOFLAGS": "-mod=mod",
        "GO111MODULE": "off",
    }
    done = subprocess.run(
        [go, "run", str(GO_MAIN)],
        input=payload,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def tokenizers(real_tokenizer_dir, tiny_llama_dir, tiny_gpt2_dir):
    from transformers import AutoTokenizer

    qwen_like = AutoTokenizer.from_pretrained(tiny_llama_dir)
    qwen_like.chat_template = QWEN_LIKE
    return {
        "smollm2": AutoTokenizer.from_pretrained(real_tokenizer_dir),
        "tiny-chatml": AutoTokenizer.from_pretrained(tiny_llama_dir),
        "qwen-like": qwen_like,
        "gpt2-fallback": AutoTokenizer.from_pretrained(tiny_gpt2_dir),
    }


def test_go_rendering_equals_the_chat_template(
    real_tokenizer_dir, tiny_llama_dir, tiny_gpt2_dir, tmp_path
):
    toks = tokenizers(real_tokenizer_dir, tiny_llama_dir, tiny_gpt2_dir)
    convs = probe_conversations()
    assert {len(c) for c in convs} == {1, 2, 3, 4, 5, 6}  # 1-3 user turns, with and without system
    cases, want = [], []
    for tok in toks.values():
        template = go_template(chat_pieces(tok))
        for conv in convs:
            cases.append((template, conv))
            want.append(render_prompt(tok, conv))
    got = go_render(cases, tmp_path)
    assert got == want
    assert "You are a helpful AI assistant named SmolLM" in got[0]  # its default system block
    assert got[-1].startswith("You are a support agent.\n\n### Instruction:\n")  # the GPT-2 format


def test_templates_that_are_not_one_block_per_message_are_refused(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    tok.chat_template = (
        "{% for m in messages %}{{ loop.index }}:{{ m['role'] }}: {{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    with pytest.raises(TemplateNotExpressible, match="the chat template (renders|is not)"):
        chat_pieces(tok)
    tok.chat_template = (
        "{{ raise_exception('System role not supported') if messages[0]['role'] == 'system' }}"
    )
    with pytest.raises(TemplateNotExpressible, match="fails on a plain conversation"):
        chat_pieces(tok)


def test_modelfile_text(real_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_tokenizer_dir)
    text = modelfile(
        "base-q8_0.gguf",
        adapter_file="a-lora-f16.gguf",
        template=go_template(chat_pieces(tok)),
        stops=stop_tokens(tok),
        system="You help customers of ACME.",
    )
    lines = text.splitlines()
    assert lines[0].startswith("# ADAPTER needs an Ollama older than 0.34.1")  # ollama/ollama#14969
    assert lines[1:3] == ["FROM ./base-q8_0.gguf", "ADAPTER ./a-lora-f16.gguf"]
    assert modelfile("m.gguf", template=None, stops=[]).startswith(
        "FROM ./m.gguf\n"
    )  # merged: no note
    assert (
        'PARAMETER stop "<|im_end|>"' in lines
        and 'SYSTEM """You help customers of ACME."""' in lines
    )
    assert text.count('TEMPLATE """') == 1
    with pytest.raises(TemplateNotExpressible, match="three double quotes"):
        modelfile("m.gguf", template=None, stops=[], system='say """hi"""')
