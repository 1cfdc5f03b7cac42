"""Tiny random models of the six families people fine-tune, built from their configs.

Qwen3, Gemma 3 (text only), Llama 3.x, Phi-3, Mistral and Granite: 2 layers, 64 wide, each
with its family's quirks kept (Gemma 3's GELU-tanh MLP, norm offsets and sliding layers,
Phi-3's fused ``qkv_proj`` / ``gate_up_proj``, Mistral's sliding window, Granite's four
multipliers set away from 1 so a path that ignores them shows).

The tokenizer is the default model's real byte-level BPE (SmolLM2's 49k vocabulary): llama.cpp's
converter identifies a BPE tokenizer by hashing how it splits a probe text and refuses a
made-up one (see tests/adapters/export/conftest.py), and these models must convert. Each family
gets its own control tokens added to it (``<start_of_turn>``, ``<|eot_id|>``, ``<|end|>`` ...)
and a small chat template written after the real one, so the end-of-turn token, the role
markers and Qwen3's ``<think>`` block are the family's own. Phi-3's tokenizer config says
``GPT2Tokenizer``, as Phi-4 mini's does, which is what llama.cpp's Phi-3 converter reads when
there is no SentencePiece model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FAMILIES = ("qwen3", "gemma3", "llama3", "phi3", "mistral", "granite")

QWEN3_TEMPLATE = (  # Qwen3's: an empty think block after the answer's header when thinking is off
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = "
    "content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.last %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' "
    "}}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- "
    "'<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
GEMMA3_TEMPLATE = (  # Gemma 3's: no system role (folded into the first user turn), "model" answers
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set first = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set first = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + message['content'] | "
    "trim"
    " + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}"
)
LLAMA3_TEMPLATE = (  # Llama 3.x's headers, each turn ended by <|eot_id|>
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' "
    "}}{%- endif %}"
)
PHI3_TEMPLATE = (  # Phi-3 / Phi-4 mini's: <|role|>\n text <|end|>\n
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)
# Mistral's [INST] ... [/INST] answer</s>; the system text joins the first turn
MISTRAL_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{{- '[INST] ' + (system if loop.first else '') + message['content'] + '[/INST]' }}"
    "{%- else %}{{- ' ' + message['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}"
)
GRANITE_TEMPLATE = (  # Granite 3.x's roles, each turn ended by <|end_of_text|> (its eos)
    "{%- for message in messages %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + "
    "'<|end_of_text|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
)


@dataclass(frozen=True)
class FamilySpec:
    """One family: its config class and extras, control tokens, template and token roles."""

    config_class: str
    specials: tuple[
        str, ...
    ]  # control tokens (special: decoding with skip_special_tokens drops them)
    template: str
    bos: str
    eos: str  # the tokenizer's eos (the real model's generation_config stops on it)
    end_of_turn: str  # what ends an assistant turn in the template
    extra: dict = field(default_factory=dict)
    plain: tuple[
        str, ...
    ] = ()  # added tokens that are not special (Qwen3's <think>: kept in decoding)


SPECS = {
    "qwen3": FamilySpec(
        "Qwen3Config",
        ("<|im_start|>", "<|im_end|>"),
        QWEN3_TEMPLATE,
        "<|endoftext|>",
        "<|im_end|>",
        "<|im_end|>",
        {"head_dim": 16},
        ("<think>", "</think>"),
    ),
    "gemma3": FamilySpec(
        "Gemma3TextConfig",
        ("<start_of_turn>", "<end_of_turn>"),
        GEMMA3_TEMPLATE,
        "<|endoftext|>",
        "<end_of_turn>",
        "<end_of_turn>",
        {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 16},
    ),
    "llama3": FamilySpec(
        "LlamaConfig",
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        LLAMA3_TEMPLATE,
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|eot_id|>",
        {"rope_theta": 500000.0},
    ),
    "phi3": FamilySpec(
        "Phi3Config",
        ("<|user|>", "<|assistant|>", "<|system|>", "<|end|>"),
        PHI3_TEMPLATE,
        "<|endoftext|>",
        "<|endoftext|>",
        "<|end|>",
        {},
    ),
    "mistral": FamilySpec(
        "MistralConfig",
        ("<s>", "</s>", "[INST]", "[/INST]"),
        MISTRAL_TEMPLATE,
        "<s>",
        "</s>",
        "</s>",
        {"sliding_window": 64, "head_dim": 16},
    ),
    "granite": FamilySpec(
        "GraniteConfig",
        ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"),
        GRANITE_TEMPLATE,
        "<|end_of_text|>",
        "<|end_of_text|>",
        "<|end_of_text|>",
        {
            "embedding_multiplier": 6.0,
            "residual_multiplier": 0.5,
            "logits_scaling": 4.0,
            "attention_multiplier": 0.125,
        },
    ),
}


def family_tokenizer(family: str, base_tokenizer_dir: Path):
    """The default model's tokenizer with ``family``'s control tokens and chat template."""
    from transformers import AutoTokenizer

    spec = SPECS[family]
    tok = AutoTokenizer.from_pretrained(base_tokenizer_dir)
    tok.add_special_tokens(
        {"additional_special_tokens": [s for s in spec.specials if s not in tok.get_vocab()]}
    )
    tok.add_special_tokens(
        {"bos_token": spec.bos, "eos_token": spec.eos, "pad_token": "<|endoftext|>"}
    )
    tok.add_tokens(list(spec.plain))
    tok.chat_template = spec.template
    return tok


def family_config(family: str, vocab_size: int, **overrides):
    """A 2-layer, 64-wide config of ``family`` (``overrides``: token ids, a shorter window)."""
    import transformers

    spec = SPECS[family]
    cls = getattr(transformers, spec.config_class)
    return cls(
        **{
            "vocab_size": vocab_size,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "tie_word_embeddings": True,
            **spec.extra,
            **overrides,
        }
    )


def build_family(family: str, folder: Path, base_tokenizer_dir: Path, std: float = 0.15) -> Path:
    """Save a tiny random ``family`` model and its tokenizer into ``folder``.

    The weights are drawn wider than transformers' 0.02 init (``std``) so greedy answers are
    varied text, not one token repeated, and two engines' agreement means something.
    """
    import torch
    from transformers import AutoModelForCausalLM

    tok = family_tokenizer(family, base_tokenizer_dir)
    torch.manual_seed(0)
    spec = SPECS[family]
    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.convert_tokens_to_ids(spec.eos),
        "pad_token_id": tok.pad_token_id,
    }
    model = AutoModelForCausalLM.from_config(family_config(family, len(tok), **ids))
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, std)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if (
        family == "phi3"
    ):  # llama.cpp's Phi-3 converter reads a GPT-2 BPE only when told so (Phi-4 mini)
        path = folder / "tokenizer_config.json"
        path.write_text(
            json.dumps(
                {**json.loads(path.read_text()), "tokenizer_class": "GPT2Tokenizer"}, indent=2
            )
        )
    return folder
