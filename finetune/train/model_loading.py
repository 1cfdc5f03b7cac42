"""Load a resolved base model for training or inference and put LoRA on it.

Quantized loading (bitsandbytes 4-bit NF4 / 8-bit) and LoRA target selection per
architecture live here so training, the session and the benchmark load models one way.
"""

from __future__ import annotations

import logging
import os

from core import families
from core.models import ResolvedModel
from finetune.config import LoraArgs

log = logging.getLogger(__name__)

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_dtype(precision: str):
    import torch

    return getattr(torch, DTYPES[precision])


def set_cpu_threads(n: int = 0) -> int:
    """Use one thread per physical core: oversubscribed threads were measured far slower."""
    import torch

    n = n or len(os.sched_getaffinity(0))
    torch.set_num_threads(n)
    return n


def load_tokenizer(resolved: ResolvedModel, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolved.path, trust_remote_code=trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(
    resolved: ResolvedModel,
    device: str = "cpu",
    precision: str = "fp32",
    quantization: str = "none",
    trust_remote_code: bool = False,
):
    """Load the base model on ``device``; quantized layers via bitsandbytes when asked.

    Weights are kept in fp32 for fp32 runs; for fp16/bf16 runs on CUDA they are loaded in
    that dtype (LoRA weights stay fp32 inside autocast), on CPU they stay fp32 and autocast
    does the rest.
    """
    import torch
    from transformers import AutoModelForCausalLM

    on_cuda = device.startswith("cuda")
    dtype = torch_dtype(precision) if on_cuda else torch.float32
    kwargs = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    from core.gpu import attention_implementation

    if attn := attention_implementation(device, precision):
        kwargs["attn_implementation"] = attn
    if quantization != "none":
        kwargs["quantization_config"] = _bnb_config(quantization, precision, on_cuda)
        kwargs["device_map"] = {"": device}
    model = AutoModelForCausalLM.from_pretrained(resolved.path, **kwargs)
    if quantization == "none":
        model.to(device)
    return model


def _bnb_config(quantization: str, precision: str, on_cuda: bool):
    import torch
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    # NF4 with double quantization; compute in the run's precision (fp32 on CPU).
    compute = torch_dtype(precision) if on_cuda else torch.float32
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
    )


def keep_4bit_weights_differentiable(model) -> None:
    """Keep bitsandbytes' 4-bit layers off their CPU inference packing while they train.

    On a CPU with AVX512-BF16, a 4-bit layer's first forward in eval mode without gradients (a
    validation pass, a probe's answer) repacks its weights for an inference kernel that has no
    backward, and never packs them back: every later training step then sends no gradient
    through the frozen layers, so the LoRA weights below them train on wrong gradients.
    """
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def resolve_targets(model, architecture: str, lora: LoraArgs) -> list[str]:
    """LoRA target module names: explicit list, or chosen per architecture for "auto".

    "auto" takes the family's own projections (``core.families``: Phi-3's fused ``qkv_proj``
    and ``gate_up_proj`` among them) when the model has them all; otherwise Llama's names or
    GPT-2's when present, and every linear layer but the head as the last resort.
    """
    if lora.target_modules != "auto":
        return list(lora.target_modules)
    leaf_names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    preset = families.lora_targets(architecture, lora.include_mlp)
    if preset and set(preset) <= leaf_names:
        return preset
    attn, mlp = list(families.LLAMA_ATTN), list(families.LLAMA_MLP)
    if set(attn) <= leaf_names:
        return attn + (mlp if lora.include_mlp and set(mlp) <= leaf_names else [])
    if architecture == "gpt2" or {"c_attn", "c_proj"} <= leaf_names:
        return ["c_attn", "c_proj"] + (["c_fc"] if lora.include_mlp else [])
    return _linear_leaf_names(model)


def _linear_leaf_names(model) -> list[str]:
    import torch

    skip = {"lm_head", "embed_out", "output", "score"}
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] not in skip
    }
    if not names:
        raise ValueError("found no linear layers to put LoRA on; name target modules explicitly")
    return sorted(names)


def apply_lora(
    model,
    architecture: str,
    lora: LoraArgs,
    quantization: str = "none",
    gradient_checkpointing: bool = False,
):
    """Wrap ``model`` with a fresh LoRA adapter; k-bit preparation when quantized."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    targets = resolve_targets(model, architecture, lora)
    if quantization == "4bit":
        keep_4bit_weights_differentiable(model)
    if quantization != "none":
        # use_reentrant=False as below: otherwise torch picks reentrant checkpointing here only.
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif gradient_checkpointing and hasattr(
        model, "activation_checkpointing_enable"
    ):  # the pinned transformers
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    elif (
        gradient_checkpointing
    ):  # an older transformers (a GPU machine's own install): the old name
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # Checkpointing makes the embeddings' output require a gradient (transformers adds that hook
    # here and PEFT again in get_peft_model, for reentrant checkpointing's sake), and backward
    # then runs through every block, also those below `top_layers` that hold no adapter.
    # Non-reentrant checkpointing reaches the LoRA weights inside a block without it (PEFT's
    # k-bit preparation skips it for the same reason), so both hooks go: this one before PEFT's
    # call overwrites its handle.
    if gradient_checkpointing:
        model.disable_input_require_grads()
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        layers_to_transform=top_layer_indices(model, lora.top_layers),
        task_type="CAUSAL_LM",
        fan_in_fan_out=architecture == "gpt2",  # GPT-2 uses Conv1D (weights stored transposed)
    )
    peft_model = get_peft_model(model, config)
    if gradient_checkpointing:
        model.disable_input_require_grads()
    return peft_model


def top_layer_indices(model, top_layers: int) -> list[int] | None:
    """The indices of the last ``top_layers`` transformer blocks (None: adapt every block).

    Raises:
        ValueError: the model's config names no block count, so "the last N" has no meaning.
    """
    if not top_layers:
        return None
    config = getattr(model, "config", None)
    text = (
        config.get_text_config() if hasattr(config, "get_text_config") else config
    )  # GPT-2: n_layer
    blocks = getattr(text, "num_hidden_layers", None)
    if not isinstance(blocks, int):
        raise ValueError(
            "LoRA top layers needs the model's block count, and its config names none: "
            "set top layers to 0 (adapt every block)"
        )
    if top_layers >= blocks:
        return None
    return list(range(blocks - top_layers, blocks))
