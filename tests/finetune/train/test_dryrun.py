"""The memory estimate and the dry run on the tiny llama model."""

import dataclasses
import json

import pytest

from core import hardware
from core.models import resolve
from finetune.__main__ import main
from finetune.config import RunConfig, micro_batch
from finetune.train.dryrun import ACT_VALUES, estimate_memory


def _cfg(model_dir, **train_overrides) -> RunConfig:
    cfg = RunConfig()
    cfg.model.name = str(model_dir)
    cfg.data.max_length = 96
    cfg.lora.r = 4
    for k, v in train_overrides.items():
        setattr(cfg.train, k, v)
    return cfg


def test_dry_run_cli_times_one_step_and_writes_nothing(tiny_llama_dir, home, capsys):
    code = main(
        [
            "train",
            "--dry-run",
            "--model",
            str(tiny_llama_dir),
            "--data",
            "assets/demo_support.jsonl",
            "--max-samples",
            "48",
            "--max-length",
            "96",
            "--batch-size",
            "4",
            "--lora-r",
            "4",
            "--grad-accum",
            "2",
            "--max-steps",
            "10",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["seconds_per_step"] > report["forward_backward_seconds"] > 0
    assert report["peak_memory_gib"] > 0 and report["memory_added_gib"] > 0
    assert (
        report["rows_per_micro_batch"] == 4
        and 0 < report["label_tokens"] < report["tokens_per_micro_batch"] <= 4 * 96
    )
    assert report["total_steps"] == 10
    assert report["projected_seconds"] == pytest.approx(10 * report["seconds_per_step"])
    assert report["estimate"]["fits"] is True and report["estimate"]["total_gib"] > 0
    assert (
        report["estimate"]["lora_params"] == report["trainable_params"]
    )  # the arithmetic matches PEFT
    for sub in ("adapters", "runs"):  # nothing written (the home may not even exist)
        assert not (home / sub).exists() or not list((home / sub).iterdir())


def test_estimate_grows_with_batch_and_length_and_shrinks_when_quantized(tiny_llama_dir, home):
    resolved = resolve(str(tiny_llama_dir))

    def total(**overrides):
        cfg = _cfg(tiny_llama_dir, **{k: v for k, v in overrides.items() if k != "max_length"})
        cfg.data.max_length = overrides.get("max_length", 96)
        return estimate_memory(cfg, resolved)

    base = total()
    assert total(batch_size=16)["activations_gib"] == pytest.approx(
        2 * total(batch_size=8)["activations_gib"]
    )
    assert total(batch_size=16)["total_gib"] > base["total_gib"]
    assert total(max_length=192)["total_gib"] > base["total_gib"]
    assert total(gradient_checkpointing=True)["activations_gib"] < base["activations_gib"]
    q8, q4 = total(quantization="8bit"), total(quantization="4bit")
    assert q4["weights_gib"] < q8["weights_gib"] < base["weights_gib"]
    assert q4["total_gib"] < q8["total_gib"] < base["total_gib"]
    # r * (in + out) for q, o (64->64), k, v (64->32), gate, up, down (64<->128), two layers
    assert base["lora_params"] == 4 * 2 * (2 * (64 + 64) + 2 * (64 + 32) + 3 * (64 + 128))
    assert base["fits"] and base["warning"] == ""
    top = _cfg(tiny_llama_dir)
    top.lora.top_layers = 1  # the last of the two blocks only: half the LoRA weights
    top_estimate = estimate_memory(top, resolved)
    assert top_estimate["lora_params"] == base["lora_params"] // 2
    # block 0 keeps no activations for backward (it needs no gradient): half of them
    assert top_estimate["activations_gib"] == pytest.approx(base["activations_gib"] / 2)
    # with checkpointing each block keeps its input: one block input less
    every = _cfg(tiny_llama_dir, gradient_checkpointing=True)
    top = _cfg(tiny_llama_dir, gradient_checkpointing=True)
    top.lora.top_layers = 1
    one_input = (
        estimate_memory(every, resolved)["activations_gib"]
        - estimate_memory(top, resolved)["activations_gib"]
    )
    assert one_input == pytest.approx(base["activations_gib"] / 2 / ACT_VALUES)


def test_estimate_says_when_it_will_not_fit(tiny_llama_dir, home, monkeypatch):
    hw = hardware.detect()
    small = dataclasses.replace(
        hw, devices=[dataclasses.replace(d, memory_gib=0.001) for d in hw.devices]
    )
    monkeypatch.setattr(hardware, "detect", lambda: small)
    est = estimate_memory(_cfg(tiny_llama_dir), resolve(str(tiny_llama_dir)))
    assert (
        est["fits"] is False
        and "0.0 GiB" in est["warning"]
        and "gradient checkpointing" in est["warning"]
    )


def test_cpu_bf16_estimate_counts_the_short_rows_attention_weights(tiny_llama_dir, home):
    """Under the CPU's bf16 autocast short rows keep each layer's attention weights (6 bytes per
    head, query and key); fp32 runs and packed rows go through sdpa and keep none."""
    resolved = resolve(str(tiny_llama_dir))
    est = {
        p: estimate_memory(_cfg(tiny_llama_dir, device="cpu", precision=p), resolved)
        for p in ("fp32", "bf16")
    }
    cfg = _cfg(tiny_llama_dir)
    tokens = micro_batch(cfg.train) * 96
    attention = tokens * 4 * 96 * 6 * 2  # 4 heads, 96 keys, 6 bytes, 2 layers
    gib = 2**30
    assert est["bf16"]["activations_gib"] * gib == pytest.approx(
        est["fp32"]["activations_gib"] * gib / 2 + attention
    )


def test_a_budget_dry_run_says_how_many_steps_the_budget_buys_after_start_up(tiny_llama_dir, home):
    import time

    from finetune.train.dryrun import dry_run
    from finetune.train.speed_record import load

    cfg = _cfg(tiny_llama_dir, time_budget_s=60, batch_size=4, cpu_threads=1)
    cfg.data.max_samples = 48
    report = dry_run(cfg, started=time.time())
    b = report["budget"]
    assert (
        b["startup_s"] > 0
        and 0 < b["step_s"] < 5
        and b["val_batch_s"] > 0
        and b["val_batches"] == 1
    )
    assert b["verdict"] == "ok" and b["steps"] >= 30 and report["total_steps"] == b["steps"]
    assert b["sentence"].startswith(
        f"A 1-minute budget buys about {b['steps']} steps here: start-up "
    )
    assert load(cfg)[1]["source"] == "dry run"  # kept for Check and Start
    assert "compile" not in report  # "auto" on the CPU: eager, as the run
    # The same settings, started 58 s before the model loads: the budget is gone before a step.
    late = dry_run(cfg, started=time.time() - 58)["budget"]
    assert late["verdict"] == "refuse" and late["steps"] == 0
    assert "A useful run needs at least 30 steps: give it at least 2 minutes" in late["sentence"]


def test_a_dry_run_of_compiled_layers_times_a_compiled_step_and_budgets_the_compiling(
    tiny_llama_dir, home
):
    """As the run does (``train.compile`` on; auto on a GPU): the first step compiles and is
    timed apart; the step reported, and the typical one the budget is sized by, ran compiled;
    the compiling comes out of the budget with the start-up."""
    from finetune.train.dryrun_process import dry_run_in_child
    from ui.views.train_check import compile_sentence

    cfg = _cfg(tiny_llama_dir, time_budget_s=120, batch_size=4, cpu_threads=1, compile="on")
    cfg.data.max_samples = 48
    # In a fresh process, as the Train tab runs it: compiled code that an earlier test left in
    # this worker's dynamo would make the dry run compile nothing.
    report = dry_run_in_child(cfg)
    c, b = report["compile"], report["budget"]
    assert c["compiled"] and c["compiled_graphs"] >= 1 and c["first_step_s"] > 0, c
    assert b["startup_s"] > c["compile_s"] > 0 and b["step_s"] > 0 and b["verdict"] == "ok"
    said = compile_sentence(c)
    assert said.startswith("The run compiles its decoder layers: its first step takes ")
    assert compile_sentence(None) == ""
    failed = compile_sentence({"compiled": False, "compile_failed": "CppCompileError: no cc"})
    assert failed.startswith("Compiling the decoder layers failed here (CppCompileError: no cc)")
