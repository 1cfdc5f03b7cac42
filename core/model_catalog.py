"""The small models TuneDesk recommends, each with the shape of its published config.json.

The Train tab offers these by name (any other Hub id or folder still works) and ``python -m
bench model-costs`` builds each one with random weights of this shape to measure what it costs
on a machine. The shapes are transcribed by hand from the published ``config.json`` files on the
Hugging Face Hub (nothing is downloaded here); ``params`` is the count the model card states,
which tests/core/test_model_catalog.py checks against a model built from the shape.

Granite 350M is not listed: its published shape (IBM's Granite 4.0 nano uses a hybrid
configuration class) is not known here with enough confidence to transcribe. No torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.models import DEFAULT_MODEL, is_default


@dataclass(frozen=True)
class CatalogModel:
    """One recommended model: what the picker shows and the shape the benchmark builds."""

    name: str  # display name, e.g. "Qwen3 0.6B"
    hub_id: str  # the Hub id a run resolves
    family: str  # core.families' family name
    params: int  # total parameters as the model card states them, rounded as it rounds them
    config: dict = field(default_factory=dict)  # the published config.json's shape fields
    note: str = ""  # what the picker adds after the name


def _llama(*, hidden, inter, layers, heads, kv, vocab, **extra) -> dict:
    """A Llama-architecture config.json (SmolLM2 and Llama 3.2 are both this class)."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hidden // heads,
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        **extra,
    }


def _smollm2(*, hidden, inter, layers, heads, kv) -> dict:
    """SmolLM2's config.json: a Llama with its own vocabulary, norm epsilon, RoPE base and ids."""
    return _llama(
        hidden=hidden,
        inter=inter,
        layers=layers,
        heads=heads,
        kv=kv,
        vocab=49152,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        bos_token_id=1,
        eos_token_id=2,
    )


_GEMMA3_LAYERS = 18
# Gemma 3: five sliding-window (local) layers, then one full-attention (global) layer.
_GEMMA3_TYPES = [
    "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(_GEMMA3_LAYERS)
]

CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel(
        "SmolLM2 135M Instruct",
        DEFAULT_MODEL,
        "llama",
        135_000_000,
        _smollm2(
            hidden=576,
            inter=1536,
            layers=30,
            heads=9,
            kv=3,
        ),
        note="default, bundled",
    ),
    CatalogModel(
        "Gemma 3 270M",
        "google/gemma-3-270m-it",
        "gemma3",
        270_000_000,
        {
            "model_type": "gemma3_text",
            "architectures": ["Gemma3ForCausalLM"],
            "hidden_size": 640,
            "intermediate_size": 2048,
            "num_hidden_layers": _GEMMA3_LAYERS,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 262144,
            "tie_word_embeddings": True,
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": 256,
            "sliding_window": 512,
            "layer_types": _GEMMA3_TYPES,
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 32768,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
        },
    ),
    CatalogModel(
        "SmolLM2 360M Instruct",
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        "llama",
        360_000_000,
        _smollm2(
            hidden=960,
            inter=2560,
            layers=32,
            heads=15,
            kv=5,
        ),
    ),
    CatalogModel(
        "Qwen3 0.6B",
        "Qwen/Qwen3-0.6B",
        "qwen3",
        600_000_000,
        {
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "max_position_embeddings": 40960,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": 28,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
        },
    ),
    CatalogModel(
        "Llama 3.2 1B Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        "llama3",
        1_230_000_000,
        _llama(
            hidden=2048,
            inter=8192,
            layers=16,
            heads=32,
            kv=8,
            vocab=128256,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            max_position_embeddings=131072,
            rope_scaling={
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            bos_token_id=128000,
            eos_token_id=[128001, 128008, 128009],
        ),
        note="gated on the Hub: accept Meta's licence",
    ),
)


def find(name: str | None) -> CatalogModel | None:
    """The catalog entry a Train-tab value names (Hub id, display name or a
    default alias), or None."""
    text = (name or "").strip()
    if not text:
        return None
    if is_default(text):
        text = DEFAULT_MODEL
    low = text.lower()
    return next((m for m in CATALOG if low in (m.hub_id.lower(), m.name.lower())), None)


def choices() -> list[tuple[str, str]]:
    """(label, Hub id) pairs for the Train tab's model picker, smallest first."""
    return [(label(m), m.hub_id) for m in CATALOG]


def label(model: CatalogModel) -> str:
    """``"Qwen3 0.6B (0.60 B parameters)"``: what the picker shows for ``model``."""
    size = f"{model.params / 1e9:.2f} B" if model.params >= 1e9 else f"{model.params / 1e6:.0f} M"
    return f"{model.name} ({size} parameters{', ' + model.note if model.note else ''})"


def config_dict(model: CatalogModel) -> dict:
    """``model``'s config.json as a dict (a copy: callers may change it)."""
    import copy

    return copy.deepcopy(model.config)
