"""Training's fast paths per family: on where a step through them equals the plain step.

Each of the six families people fine-tune (tests/family_models.py) gets LoRA on its own
projections, then one training step through ``use_lean_ops`` and the selective loss (lean
SwiGLU, lean LoRA, chunked cross-entropy, short-row attention, where ``core.families`` allows
each) against the plain model computing every logit: the same loss and the same gradients.
Gemma 3 (GELU-tanh MLP) and Phi-3 (fused ``gate_up_proj``) have no SwiGLU to take over;
Granite's multipliers all pass through the fast paths (the last test shows its logits scaling
reaching the chunked loss).
"""

from __future__ import annotations

import copy

import pytest
import torch
from family_models import FAMILIES, family_config
from transformers.pytorch_utils import Conv1D

from core import families
from finetune.config import LoraArgs
from finetune.train import cpu_attention
from finetune.train.fused import lean_head, linear_cross_entropy_sum, use_lean_ops
from finetune.train.model_loading import apply_lora, resolve_targets
from finetune.train.steps import loss_sum

VOCAB = 300
# Mistral's window shorter than the rows, so the window is in the products being compared.
SHORT_WINDOW = {"mistral": {"sliding_window": 8}, "gemma3": {"sliding_window": 8}}
PROJECTIONS = {
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
LLAMA_NAMES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _config(family: str):
    """The family's tiny config; Qwen2, SmolLM3 and GPT-2 are in ``core.families`` too."""
    import transformers

    if family in FAMILIES:
        return family_config(family, VOCAB, pad_token_id=0, **SHORT_WINDOW.get(family, {}))
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )  # same draws: none
    cls = {"qwen2": transformers.Qwen2Config, "smollm3": transformers.SmolLM3Config}[family]
    return cls(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        pad_token_id=0,
    )


def _base(family: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(family), attn_implementation="sdpa")
    with torch.no_grad():  # wider than the 0.02 init: differences in a path show in the loss
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.1)
    return model


def _lora(family: str):
    base = _base(family)
    torch.manual_seed(1)
    model = apply_lora(base, base.config.model_type, LoraArgs(r=4, alpha=8, dropout=0.0))
    for (
        name,
        param,
    ) in model.named_parameters():  # non-zero B: LoRA changes the outputs and A's gradients
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.1)
    return model.train()


def _lean(model):
    model = copy.deepcopy(model)
    use_lean_ops(model)
    return model


def _batch():
    torch.manual_seed(2)
    ids = torch.randint(3, VOCAB, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :5] = -100  # prompt tokens
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _step(model, batch, selective: bool):
    model.zero_grad()
    loss, n = loss_sum(model, batch, selective=selective)
    (loss / n).backward()
    return loss.detach(), {
        k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad
    }


@pytest.mark.parametrize("family", [*FAMILIES, "qwen2", "smollm3", "gpt2"])
def test_lora_targets_and_the_fast_paths_of_each_family(family):
    """LoRA on the family's own projections; a step through the fast paths gives the plain
    step's loss and gradients in fp32, and stays within bf16 of it under the CPU's autocast
    (short-row attention runs only there)."""
    plain = _lora(family)
    kind = plain.config.model_type
    targets = sorted(plain.peft_config["default"].target_modules)
    assert targets == sorted(PROJECTIONS.get(family, LLAMA_NAMES))
    layers = (torch.nn.Linear, Conv1D)
    linears = {
        n.rsplit(".", 1)[-1] for n, m in _base(family).named_modules() if isinstance(m, layers)
    }
    assert set(targets) == linears - {"lm_head"}  # every projection, never the head
    fast, batch = _lean(plain), _batch()
    assert (lean_head(fast) is not None) == families.allows(kind, "lean_head")
    assert (fast.config._attn_implementation == cpu_attention.NAME) == families.allows(
        kind, "short_rows"
    )

    loss_a, grads_a = _step(plain, batch, selective=False)
    loss_b, grads_b = _step(fast, batch, selective=True)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) >= 8
    for k in grads_a:  # the lean SwiGLU keeps its saved inputs in bf16: a fraction of 1 %
        rel = (grads_b[k] - grads_a[k]).norm() / grads_a[k].norm()
        assert rel < 1e-2, (k, float(rel))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        half_loss, half = _step(plain, batch, selective=False)
        fast_loss, fast_grads = _step(fast, batch, selective=True)
    torch.testing.assert_close(fast_loss, half_loss, rtol=2e-2, atol=0)
    for k in grads_a:  # both round to bf16; the fast step no farther from fp32 than the plain one
        fast_err, half_err = ((g[k] - grads_a[k]).norm() for g in (fast_grads, half))
        assert fast_err < 0.05 * grads_a[k].norm() and fast_err < 2.5 * half_err + 1e-6, (
            k,
            float(fast_err),
        )


def test_granites_logits_scaling_reaches_the_chunked_loss():
    """Granite divides the head's output by ``logits_scaling`` (4 here). The chunked loss
    passes the head through, so it gets the hidden states divided: equal to the plain loss,
    and far from a loss that skipped the division (which the test above would not tell
    apart from a right one if the scaling changed nothing)."""
    model = _lean(_lora("granite"))
    batch = _batch()
    assert model.config.logits_scaling == 4.0 and lean_head(model) is not None
    with torch.no_grad():
        plain, _ = loss_sum(model, batch, selective=False)
        chunked, _ = loss_sum(model, batch, selective=True)
        keep = batch["labels"][:, 1:] != -100
        out = model(
            **{k: batch[k] for k in ("input_ids", "attention_mask")}, output_hidden_states=True
        )
        last = out.hidden_states[-1][:, :-1][keep]
        unscaled = linear_cross_entropy_sum(
            last, model.get_base_model().lm_head.weight, batch["labels"][:, 1:][keep]
        )
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-5)
    assert abs(float(unscaled - plain)) > 0.05 * abs(float(plain))


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_only_lora_names_the_familys_attention_projections(family):
    """Without the MLP the preset still names the family's own modules: Phi-3's fused
    ``qkv_proj`` and ``o_proj``, not every linear layer (what "auto" fell back to before)."""
    model = _base(family)
    targets = resolve_targets(model, model.config.model_type, LoraArgs(include_mlp=False))
    assert targets == (
        ["qkv_proj", "o_proj"] if family == "phi3" else ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
