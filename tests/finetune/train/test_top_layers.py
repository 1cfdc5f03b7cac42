"""LoRA on the last N blocks only: backward stops below them, and the adapter loads as trained."""

import json

import pytest
import torch
from family_models import FAMILIES
from transformers import AutoModelForCausalLM

from finetune.__main__ import main
from finetune.config import LoraArgs, RunConfig, validate
from finetune.train import train
from finetune.train.model_loading import apply_lora, top_layer_indices


def _adapted_blocks(model) -> set[int]:
    return {
        int(name.split(".layers.")[1].split(".")[0])
        for name, _ in model.named_parameters()
        if "lora_A" in name and ".layers." in name
    }


def test_top_layer_indices_counts_from_the_last_block(tiny_llama_dir, tiny_gpt2_dir):
    llama = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)  # 2 blocks
    assert top_layer_indices(llama, 0) is None
    assert top_layer_indices(llama, 1) == [1]
    assert (
        top_layer_indices(llama, 2) is None and top_layer_indices(llama, 9) is None
    )  # every block: no filter
    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_gpt2_dir)  # n_layer, not num_hidden_layers
    assert top_layer_indices(gpt2, 1) == [1]


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "gradient-checkpointing"])
@pytest.mark.parametrize("top_layers", [1, 0], ids=["top-1", "all-blocks"])
def test_only_the_top_block_is_adapted_and_backward_skips_the_one_below(
    tiny_llama_dir, top_layers, checkpointing
):
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model = apply_lora(
        base,
        "llama",
        LoraArgs(r=4, alpha=8, dropout=0.0, top_layers=top_layers),
        gradient_checkpointing=checkpointing,
    ).train()
    assert _adapted_blocks(model) == ({1} if top_layers else {0, 1})
    needs_grad = {}

    def record(index):
        def hook(_module, _inputs, out):  # returns None: the block's output is kept as it is
            needs_grad[index] = (out[0] if isinstance(out, tuple) else out).requires_grad

        return hook

    for index, block in enumerate(model.base_model.model.model.layers):
        block.register_forward_hook(record(index))
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    model(input_ids=ids, labels=ids).loss.backward()
    # Block 0's output needs no gradient, so autograd never runs backward through it (with
    # checkpointing too); with every block adapted it does, and every LoRA B still learns.
    assert needs_grad == {0: not top_layers, 1: True}
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert len(grads) == 2 * len(_adapted_blocks(model)) * len(
        model.peft_config["default"].target_modules
    )
    assert all(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "gradient-checkpointing"])
def test_a_run_with_top_layers_trains_saves_and_reloads_them(tiny_llama_dir, home, checkpointing):
    from peft import PeftModel

    cfg = RunConfig()
    cfg.model.name = str(tiny_llama_dir)
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = "assets/demo_support.jsonl", 24, 64
    cfg.lora.r, cfg.lora.alpha, cfg.lora.top_layers = 4, 8, 1
    t = cfg.train
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        4,
        4,
        2,
        4,
        0,
        0,
    )
    t.learning_rate, t.gradient_checkpointing = 5e-3, checkpointing
    result = train(cfg)
    assert result.metrics["val_loss"] < result.metrics["base_val_loss"]
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["lora"]["top_layers"] == 1
    assert "in the last 1 blocks" in (result.adapter_dir / "README.md").read_text()
    saved = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert saved["layers_to_transform"] == [1]
    tuned = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir), result.adapter_dir
    )
    assert _adapted_blocks(tuned) == {1}


@pytest.mark.parametrize("value", [-1, 1.5, "2", True])
def test_bad_top_layers_are_refused_with_a_sentence(value):
    cfg = RunConfig()
    cfg.lora.top_layers = value
    assert any(p.startswith("LoRA top layers must be a whole number") for p in validate(cfg))


def test_the_cli_flag_reaches_the_dry_run_and_its_estimate(tiny_llama_dir, home, capsys):
    args = [
        "train",
        "--dry-run",
        "--model",
        str(tiny_llama_dir),
        "--data",
        "assets/demo_support.jsonl",
        "--max-samples",
        "24",
        "--max-length",
        "64",
        "--batch-size",
        "4",
        "--lora-r",
        "4",
        "--max-steps",
        "4",
    ]
    assert main(args) == 0
    every = json.loads(capsys.readouterr().out)
    assert main([*args, "--lora-top-layers", "1"]) == 0
    top = json.loads(capsys.readouterr().out)
    assert top["trainable_params"] == every["trainable_params"] // 2  # one of the two blocks
    assert top["estimate"]["lora_params"] == top["trainable_params"]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_with_checkpointing_backpropagates_only_through_the_top_block(family):
    from family_models import family_config

    torch.manual_seed(0)
    config = family_config(family, vocab_size=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    base = AutoModelForCausalLM.from_config(config)
    model = apply_lora(
        base,
        config.model_type,
        LoraArgs(r=4, alpha=8, dropout=0.0, top_layers=1),
        gradient_checkpointing=True,
    ).train()
    assert _adapted_blocks(model) == {1}
    blocks = model.get_base_model().model.layers
    needs_grad = {}
    for index, block in enumerate(blocks):
        block.register_forward_hook(
            lambda _m, _i, out, index=index: needs_grad.__setitem__(
                index, (out[0] if isinstance(out, tuple) else out).requires_grad
            )
        )
    ids = torch.randint(3, 256, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    assert needs_grad == {0: False, 1: True}
    lora_b = [p.grad for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all(g is not None and g.abs().sum() > 0 for g in lora_b)
