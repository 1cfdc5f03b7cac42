"""train() end to end on tiny models: real files written, real numbers computed."""

import json

import pytest
import torch

from finetune.config import RunConfig
from finetune.train import ConfigError, train


def _cfg(model_dir, **train_overrides) -> RunConfig:
    cfg = RunConfig()
    cfg.model.name = str(model_dir)
    cfg.data.path = "assets/demo_support.jsonl"
    cfg.data.max_samples = 48
    cfg.data.max_length = 96
    cfg.data.val_fraction = 0.1
    cfg.lora.r = 4
    cfg.lora.alpha = 8
    t = cfg.train
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        6,
        4,
        2,
        3,
        0,
        0,
    )
    t.learning_rate = 5e-3
    for k, v in train_overrides.items():
        setattr(t, k, v)
    return cfg


def test_invalid_settings_are_refused_before_loading(home):
    cfg = _cfg("does/not-matter", precision="fp16", batch_size=0)
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert len(info.value.problems) >= 2 and any("fp16" in p for p in info.value.problems)
    assert not list((home / "adapters").iterdir()) if (home / "adapters").exists() else True


def test_train_lowers_loss_and_saves_a_loadable_adapter(tiny_llama_dir, home):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    events = []
    result = train(_cfg(tiny_llama_dir, max_steps=12), on_event=events.append)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "status" and "start" in kinds and kinds[-1] == "done"
    progress = [e for e in events if e["type"] == "progress"]
    for key in (
        "step",
        "total_steps",
        "epoch",
        "loss",
        "lr",
        "grad_norm",
        "tokens_per_second",
        "eta",
        "peak_memory_gib",
    ):
        assert key in progress[-1]
    assert result.metrics["val_loss"] < result.metrics["base_val_loss"]
    probes = [e for e in events if e["type"] == "probe"]
    assert len(probes[-1]["answers"]) == 3
    folder = result.adapter_dir
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["base_model"]["architecture"] == "llama"
    assert manifest["data"]["fingerprint"] and manifest["lora"]["r"] == 4
    assert manifest["training"]["batch_size"] == 4 and manifest["adapter_hash"]
    assert (folder / "README.md").read_text().startswith("# ")
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    before = base(ids).logits
    tuned = PeftModel.from_pretrained(base, folder)(ids).logits
    assert not torch.allclose(before, tuned)
    assert not [p for p in (home / "adapters").iterdir() if p.name.startswith(".tmp")]


def test_gpt2_trains_with_padded_batches(tiny_gpt2_dir, home):
    events = []
    result = train(_cfg(tiny_gpt2_dir), on_event=events.append)
    start = next(e for e in events if e["type"] == "start")
    assert start["targets"] == ["c_attn", "c_fc", "c_proj"]
    assert result.status == "done" and result.adapter_dir.is_dir()


def test_stop_saves_at_the_current_step_and_resume_continues(tiny_llama_dir, home):
    cfg = _cfg(tiny_llama_dir, max_steps=8, save_every=2)
    cfg.run.run_dir = str(home / "runs" / "r1")
    cfg.run.adapter_name = "stopped-one"
    seen = []

    def stop() -> bool:
        return len([e for e in seen if e["type"] == "checkpoint"]) >= 2

    result = train(cfg, on_event=seen.append, stop=stop)
    assert result.status == "stopped" and result.steps == 4
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and manifest["steps"] == 4
    cfg.run.resume, cfg.run.adapter_name = True, "resumed-one"
    events = []
    resumed = train(cfg, on_event=events.append)
    start = next(e for e in events if e["type"] == "start")
    assert start["start_step"] == 4 and resumed.steps == 8 and resumed.status == "done"


def test_a_resume_its_checkpoint_cannot_take_is_refused_in_a_sentence(tiny_llama_dir, home):
    """Resumed with another LoRA rank, or from a damaged checkpoint, the run said "internal
    error (RuntimeError: Error(s) in loading state_dict ...)" (exit 1); it is a sentence
    naming the checkpoint, and the checkpoint is left for a resume with the run's settings."""
    cfg = _cfg(tiny_llama_dir, max_steps=4, save_every=2)
    cfg.run.run_dir = str(home / "runs" / "r1")
    cfg.run.adapter_name = "first"
    seen = []
    train(cfg, on_event=seen.append, stop=lambda: any(e["type"] == "checkpoint" for e in seen))
    ckpt = home / "runs" / "r1" / "checkpoints" / "step-0000002"
    before = {f.name: f.read_bytes() for f in ckpt.iterdir()}
    cfg.run.resume, cfg.run.adapter_name, cfg.lora.r = True, "resumed", 8
    with pytest.raises(ValueError, match=r"checkpoint step-0000002 .*LoRA rank 4.*rank 8"):
        train(cfg)
    assert {f.name: f.read_bytes() for f in ckpt.iterdir()} == before
    cfg.lora.r = 4
    weights = ckpt / "adapter_model.safetensors"
    weights.write_bytes(before["adapter_model.safetensors"][:1000])
    with pytest.raises(ValueError, match=r"checkpoint step-0000002 .*cannot be read"):
        train(cfg)
    weights.write_bytes(before["adapter_model.safetensors"])
    assert train(cfg).steps == 4


def test_a_resume_with_another_alpha_or_dropout_is_refused_naming_both_values(tiny_llama_dir, home):
    """Another LoRA alpha or dropout fits the checkpoint's tensors: the run resumed silently
    and went on training another adapter than the one it began. It is refused, naming each
    setting with the checkpoint's value and this run's, before the weights load."""
    cfg = _cfg(tiny_llama_dir, max_steps=4, save_every=2)
    cfg.run.run_dir = str(home / "runs" / "r1")
    cfg.run.adapter_name = "first"
    seen = []
    train(cfg, on_event=seen.append, stop=lambda: any(e["type"] == "checkpoint" for e in seen))
    cfg.run.resume, cfg.run.adapter_name = True, "resumed"
    cfg.lora.alpha, cfg.lora.dropout = 32, 0.2
    with pytest.raises(ValueError) as info:
        train(cfg)
    assert str(info.value) == (
        f"checkpoint step-0000002 in {home / 'runs' / 'r1'} was trained with LoRA alpha 8 and "
        "LoRA dropout 0; this run has LoRA alpha 32 and LoRA dropout 0.2: resume with the "
        "settings the run began with (--lora-alpha, --lora-dropout), or train anew without "
        "--resume"
    )
    cfg.lora.dropout = 0.0
    with pytest.raises(ValueError, match=r"with LoRA alpha 8; this run has LoRA alpha 32: "):
        train(cfg)
    cfg.lora.alpha = 8
    assert train(cfg).steps == 4


def test_a_resume_of_a_folder_with_no_checkpoint_warns_first_and_trains_from_step_0(
    tiny_llama_dir, home
):
    """A run stopped before its first checkpoint starts again from step 0 (docs/guide.md); the
    sentence saying so was a status line after the model had loaded, gone under --quiet."""
    cfg = _cfg(tiny_llama_dir, max_steps=2)
    (home / "runs" / "early").mkdir(parents=True)
    cfg.run.run_dir, cfg.run.resume, cfg.run.adapter_name = str(home / "runs" / "early"), True, "x"
    events = []
    result = train(cfg, on_event=events.append)
    assert events[0]["type"] == "warning" and events[0]["message"] == (
        f"--resume found no checkpoint in {home / 'runs' / 'early'} (its run stopped before the "
        "first one, or none ran there), so there is nothing to continue: this run trains from "
        "step 0 with the settings given"
    )
    start = next(e for e in events if e["type"] == "start")
    assert start["start_step"] == 0 and result.steps == 2


def test_a_run_stopped_before_its_first_step_saves_nothing(tiny_llama_dir, home):
    cfg = _cfg(tiny_llama_dir, max_steps=8)
    cfg.run.adapter_name = "never-stepped"
    seen = []
    result = train(cfg, on_event=seen.append, stop=lambda: True)
    assert result.status == "stopped" and result.steps == 0 and result.adapter_dir is None
    assert result.note == "stopped before training began: nothing to save"
    assert not (home / "adapters" / "never-stepped").exists()
    assert not any(e["type"] == "saved" for e in seen)
    done = seen[-1]
    assert done["type"] == "done" and done["adapter"] is None and done["note"] == result.note
    stepped = train(_cfg(tiny_llama_dir, max_steps=1))
    assert stepped.adapter_dir is not None and "no optimizer step" not in stepped.note


@pytest.mark.parametrize("quantization", ["4bit", "8bit"])
def test_quantized_runs_train_a_few_steps_on_cpu(tiny_llama_dir, home, quantization):
    pytest.importorskip("bitsandbytes")
    cfg = _cfg(tiny_llama_dir, max_steps=2, quantization=quantization)
    cfg.lora.target_modules = ["q_proj", "v_proj"]
    result = train(cfg)
    assert result.status == "done" and result.adapter_dir.is_dir()
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["training"]["quantization"] == quantization


def test_packed_rows_train_too(tiny_llama_dir, home):
    cfg = _cfg(tiny_llama_dir, max_steps=3)
    cfg.data.packing = True
    events = []
    result = train(cfg, on_event=events.append)
    start = next(e for e in events if e["type"] == "start")
    assert start["packing"] is True and result.status == "done"
